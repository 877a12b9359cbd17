//! `agentplane env`: the address and token of the `agentplane up` running on a folder,
//! as shell assignments, so that `eval "$(agentplane env --dir DIR)"` lets what runs
//! next reach its node agent: `curl -H "Authorization: Bearer $AGENTPLANE_TOKEN"
//! $AGENTPLANE_URL/v1/sessions`, the SDK's `AgentPlane.connect()` with no arguments,
//! and this CLI's own `--url`/`--token` (which read the same two variables).
//!
//! The token is a secret: it goes to stdout only, for the caller's shell, never into a
//! command line or a file.

use clap::Args;

use crate::printing::shell_quote;
use crate::ui::origin_of;
use crate::workspace::{DirArgs, Workspace};

#[derive(Args, Debug)]
pub struct EnvArgs {
    #[command(flatten)]
    dir: DirArgs,
}

pub fn run(args: EnvArgs) -> anyhow::Result<i32> {
    let workspace = Workspace::new(&args.dir);
    let info = workspace.running_up()?;
    print!("{}", assignments(&info.url, info.token.as_deref()));
    Ok(0)
}

/// The lines to `eval`. A node agent run without a token gets `unset`, so that a token
/// left from another `up` is not sent to this one.
pub fn assignments(url: &str, token: Option<&str>) -> String {
    let url = origin_of(url).unwrap_or_else(|| url.trim_end_matches('/').to_string());
    let token = match token {
        Some(token) => format!("export AGENTPLANE_TOKEN={}", shell_quote(token)),
        None => "unset AGENTPLANE_TOKEN".to_string(),
    };
    format!("export AGENTPLANE_URL={}\n{token}\n", shell_quote(&url))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn assignments_name_a_reachable_address_and_quote_for_the_shell() {
        assert_eq!(
            assignments("http://127.0.0.1:2468/", Some("ab12")),
            "export AGENTPLANE_URL=http://127.0.0.1:2468\nexport AGENTPLANE_TOKEN=ab12\n"
        );
        assert_eq!(
            assignments("http://0.0.0.0:80", None),
            "export AGENTPLANE_URL=http://127.0.0.1:80\nunset AGENTPLANE_TOKEN\n"
        );
        assert_eq!(
            assignments("http://[::]:9", Some("a b")),
            "export AGENTPLANE_URL='http://[::1]:9'\nexport AGENTPLANE_TOKEN='a b'\n"
        );
    }
}
