//! Resources a store holds, served at `/v1/resources` by a node agent that is given a
//! source of them: `agentplane up` gives its embedded node agent the directory store.
//! The node agent knows nothing of the store; it asks this trait.

use crate::model::ResourceList;

/// What `/v1/resources` and `/v1/resources/sse` serve, and what the inspector may ask
/// of a resource (waking a suspended sandbox).
pub trait ResourceSource: Send + Sync + 'static {
    /// Every resource and file error as they are now. May block for a moment (a store
    /// holds its lock while it reads a changed file): the node agent calls it off the
    /// async runtime.
    fn snapshot(&self) -> ResourceList;

    /// Changes whenever something `snapshot` shows may have changed; its value is the
    /// revision. Closed when the store is gone.
    fn subscribe(&self) -> tokio::sync::watch::Receiver<u64>;

    /// Wakes the Sandbox `namespace/name` if it is suspended for being idle or by
    /// `agentplane suspend`, as any client of its endpoint would; it serves again once
    /// its node agent has started (the list shows the phase change). Asks and returns:
    /// the caller does not wait for the start. May block for a moment, as `snapshot`.
    ///
    /// By default the source cannot wake anything: a store whose sandboxes are not
    /// suspended in this process (or not at all) keeps it, and the request is refused.
    fn wake_sandbox(&self, namespace: &str, name: &str) -> Result<Wake, WakeRefused> {
        let _ = (namespace, name);
        Err(WakeRefused::Unsupported)
    }
}

/// What [`ResourceSource::wake_sandbox`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wake {
    /// It was suspended and is asked to wake.
    Waking,
    /// It was not suspended (awake, starting, or failed): nothing to wake.
    NotSuspended,
}

/// Why [`ResourceSource::wake_sandbox`] would not wake a sandbox: each is a different
/// answer to the page (not found, a conflict with its spec, nothing this source does).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WakeRefused {
    /// The store has no Sandbox by that namespace and name.
    NotFound,
    /// It has an `endpoint`: it runs elsewhere, and nothing here suspends or wakes it.
    NotManaged,
    /// Held suspended by `spec.suspend: true`, which only its spec releases; `file`
    /// declares it (absent for a sandbox the store made itself).
    HeldBySpec { file: Option<String> },
    /// This source does not wake sandboxes.
    Unsupported,
}
