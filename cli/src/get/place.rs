//! Where a verb looked: the flags a hint must carry to find the same store when
//! pasted, and a "not found" that says which folder or cluster was searched.

use agentplane_crds::{Key, Object};

use crate::printing::{flags, shell_quote};
use crate::store::{Store, StoreArgs};
use crate::workspace::not_found;

/// The flags that name the store a verb was run on, quoted for a shell: what a hint
/// must carry to find the same store when pasted.
pub fn store_flags(args: &StoreArgs) -> String {
    match &args.kubeconfig {
        Some(kubeconfig) => flags(&[
            ("--kubeconfig", Some(kubeconfig.as_os_str())),
            ("--context", args.context.as_deref().map(std::ffi::OsStr::new)),
        ]),
        None => flags(&[
            ("--dir", Some(args.dir.dir.as_os_str())),
            ("--state-dir", args.dir.state_dir.as_deref().map(std::path::Path::as_os_str)),
        ]),
    }
}

/// ` -n NAMESPACE` for a hint about a resource outside the store's default namespace.
pub fn namespace_flag(store: &Store, namespace: &str) -> String {
    if namespace == store.namespace(None) { String::new() } else { format!(" -n {}", shell_quote(namespace)) }
}

/// Where a verb looked, for an error: the folder (absolute, as the user may have given
/// it relative) or the cluster.
pub fn store_place(args: &StoreArgs) -> String {
    match &args.kubeconfig {
        Some(kubeconfig) => match &args.context {
            Some(context) => format!("in the cluster of {} (context {context})", kubeconfig.display()),
            None => format!("in the cluster of {}", kubeconfig.display()),
        },
        None => {
            let dir = std::path::absolute(&args.dir.dir).unwrap_or_else(|_| args.dir.dir.clone());
            match &args.dir.state_dir {
                Some(state) => format!("in the folder {} (status in {})", dir.display(), state.display()),
                None => format!("in the folder {}", dir.display()),
            }
        }
    }
}

/// The resource, or a "not found" that says where it was looked for.
pub async fn require(store: &Store, args: &StoreArgs, key: &Key) -> anyhow::Result<Object> {
    store.require(key).await.map_err(|e| placed(e, key, args))
}

/// A "not found" of `key`, with the place it was looked in; any other error as it is.
pub fn placed(error: anyhow::Error, key: &Key, args: &StoreArgs) -> anyhow::Error {
    let missing = not_found(key).to_string();
    if error.to_string() == missing { anyhow::anyhow!("{missing}, {}", store_place(args)) } else { error }
}
