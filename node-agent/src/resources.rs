//! Resources a store holds, served at `/v1/resources` by a node agent that is given a
//! source of them: `agentplane up` gives its embedded node agent the directory store.
//! The node agent knows nothing of the store; it asks this trait.

use crate::model::ResourceList;

/// What `/v1/resources` and `/v1/resources/sse` serve.
pub trait ResourceSource: Send + Sync + 'static {
    /// Every resource and file error as they are now. May block for a moment (a store
    /// holds its lock while it reads a changed file): the node agent calls it off the
    /// async runtime.
    fn snapshot(&self) -> ResourceList;

    /// Changes whenever something `snapshot` shows may have changed; its value is the
    /// revision. Closed when the store is gone.
    fn subscribe(&self) -> tokio::sync::watch::Receiver<u64>;
}
