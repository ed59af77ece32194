//! Spawning one task per master and collecting their answers as they come.
//!
//! Each master's work runs in its own task, so a caller that returns at quorum (or is
//! cancelled) leaves the slower masters' calls running to completion: their RTT is recorded,
//! and any clean-up chained after a write (see `acquire_on`) runs after that write was sent.

use std::future::Future;
use std::sync::Arc;

use tokio::sync::mpsc;
use tokio_util::task::TaskTracker;

use crate::fleet::Node;

/// The way back from one master's task to the caller.
pub(crate) struct Reply<T> {
    index: usize,
    tx: mpsc::UnboundedSender<(usize, T)>,
}

impl<T> Reply<T> {
    /// Reports `value` for this master; ignored once the caller stopped listening.
    pub(crate) fn send(&self, value: T) {
        let _ = self.tx.send((self.index, value));
    }
}

/// Runs `per_node` for every master in its own task (tracked by `tasks`); answers arrive as `(node index, T)`.
/// The receiver yields `None` once every task has finished.
pub(crate) fn spawn_each<'a, T, F, Fut>(
    tasks: &TaskTracker,
    nodes: impl IntoIterator<Item = &'a Arc<Node>>,
    per_node: F,
) -> mpsc::UnboundedReceiver<(usize, T)>
where
    T: Send + 'static,
    F: Fn(Arc<Node>, Reply<T>) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let (tx, rx) = mpsc::unbounded_channel();
    for node in nodes {
        let reply = Reply {
            index: node.index(),
            tx: tx.clone(),
        };
        tasks.spawn(per_node(Arc::clone(node), reply));
    }
    rx
}
