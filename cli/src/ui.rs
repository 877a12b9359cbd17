//! `agentplane ui`: a link to the web inspector of the `agentplane up` running on a
//! folder, logged in by a one-time code in its fragment (`/ui/#code=CODE`): a browser
//! never sends the fragment anywhere, and the code is no token (single use, 10
//! minutes; the page exchanges it for a token of its own). `up` and `node-agent` print
//! such a link when they start; this prints a fresh one.

use anyhow::Context;
use clap::Args;

use crate::workspace::{DirArgs, Workspace};

#[derive(Args, Debug)]
pub struct UiArgs {
    #[command(flatten)]
    dir: DirArgs,
}

pub async fn run(args: UiArgs) -> anyhow::Result<i32> {
    let workspace = Workspace::new(&args.dir);
    // Says which folder has no `up` and how to start one.
    let client = workspace.node_agent()?;
    let requires_token = workspace.up().is_some_and(|info| info.token.is_some());
    let base = client.base_url().to_string();
    let code = match requires_token {
        true => Some(client.create_login_code().await.context("asking `agentplane up` for a login code")?.code),
        false => None,
    };
    println!("{}", inspector_url(&base, code.as_deref()));
    Ok(0)
}

/// The inspector's address on the node agent at `base`, with a login code when it
/// needs a token. A wildcard listen address (`0.0.0.0`, `[::]`) is reached on loopback.
pub fn inspector_url(base: &str, code: Option<&str>) -> String {
    let mut url = match origin_of(base) {
        Some(url) => url,
        None => base.trim_end_matches('/').to_string(),
    };
    url.push_str("/ui/");
    if let Some(code) = code {
        url.push_str("#code=");
        url.push_str(code);
    }
    url
}

/// `scheme://host:port` of `base`, its wildcard host made loopback.
pub fn origin_of(base: &str) -> Option<String> {
    let (scheme, rest) = base.split_once("://")?;
    let authority = rest.split('/').next()?;
    let authority = match authority.rsplit_once(':') {
        Some(("0.0.0.0", port)) => format!("127.0.0.1:{port}"),
        Some(("[::]", port)) => format!("[::1]:{port}"),
        _ => authority.to_string(),
    };
    Some(format!("{scheme}://{authority}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_name_a_reachable_address_and_carry_the_code_in_the_fragment() {
        assert_eq!(inspector_url("http://127.0.0.1:2468", Some("ab12")), "http://127.0.0.1:2468/ui/#code=ab12");
        assert_eq!(inspector_url("http://127.0.0.1:2468/", None), "http://127.0.0.1:2468/ui/");
        assert_eq!(inspector_url("http://0.0.0.0:80", Some("c")), "http://127.0.0.1:80/ui/#code=c");
        assert_eq!(inspector_url("http://[::]:9", None), "http://[::1]:9/ui/");
        assert_eq!(inspector_url("http://[::1]:9", None), "http://[::1]:9/ui/");
    }
}
