//! A keyed work queue, as kube-runtime's scheduler and client-go's workqueue: a key
//! waits at most once however often it is added, is never worked on by two workers
//! at once, and one added while it is being worked on runs again afterwards.
//!
//! Its size is bounded by the number of distinct keys (the resources the store
//! holds), not by how many times they were added: adding is deduplication, not a push.

use std::collections::{HashMap, HashSet, VecDeque};
use std::hash::Hash;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

pub struct WorkQueue<K> {
    inner: Mutex<Inner<K>>,
    ready: Notify,
    /// Told whenever the last key is done and none waits.
    idle: Notify,
}

struct Inner<K> {
    queue: VecDeque<K>,
    queued: HashSet<K>,
    active: HashSet<K>,
    /// Added while active: queued again when its worker is done.
    again: HashSet<K>,
    /// The earliest time each key is scheduled for (one timer per key at most).
    scheduled: HashMap<K, Instant>,
    closed: bool,
}

impl<K: Clone + Eq + Hash + Send + 'static> WorkQueue<K> {
    pub fn new() -> Arc<Self> {
        Arc::new(WorkQueue {
            inner: Mutex::new(Inner {
                queue: VecDeque::new(),
                queued: HashSet::new(),
                active: HashSet::new(),
                again: HashSet::new(),
                scheduled: HashMap::new(),
                closed: false,
            }),
            ready: Notify::new(),
            idle: Notify::new(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner<K>> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn add(&self, key: K) {
        let mut inner = self.lock();
        if inner.active.contains(&key) {
            inner.again.insert(key);
            return;
        }
        if inner.queued.insert(key.clone()) {
            inner.queue.push_back(key);
            drop(inner);
            self.ready.notify_one();
        }
    }

    /// Adds `key` after `delay`, unless it is already scheduled sooner.
    pub fn add_after(self: &Arc<Self>, key: K, delay: Duration) {
        if delay.is_zero() {
            return self.add(key);
        }
        let at = Instant::now() + delay;
        {
            let mut inner = self.lock();
            match inner.scheduled.get(&key) {
                Some(existing) if *existing <= at => return,
                _ => inner.scheduled.insert(key.clone(), at),
            };
        }
        let queue = Arc::downgrade(self);
        tokio::spawn(async move {
            tokio::time::sleep_until(at).await;
            let Some(queue) = queue.upgrade() else { return };
            let due = {
                let mut inner = queue.lock();
                // A later, sooner schedule owns the key now.
                if inner.scheduled.get(&key) == Some(&at) {
                    inner.scheduled.remove(&key);
                    true
                } else {
                    false
                }
            };
            if due {
                queue.add(key);
            }
        });
    }

    /// The next key to work on; `None` once closed.
    pub async fn next(&self) -> Option<K> {
        loop {
            let notified = self.ready.notified();
            {
                let mut inner = self.lock();
                if inner.closed {
                    return None;
                }
                if let Some(key) = inner.queue.pop_front() {
                    inner.queued.remove(&key);
                    inner.active.insert(key.clone());
                    if !inner.queue.is_empty() {
                        // Wake another worker for the rest.
                        self.ready.notify_one();
                    }
                    return Some(key);
                }
            }
            notified.await;
        }
    }

    /// The worker is done with `key`.
    pub fn done(&self, key: &K) {
        let mut inner = self.lock();
        inner.active.remove(key);
        if inner.again.remove(key) && inner.queued.insert(key.clone()) {
            inner.queue.push_back(key.clone());
            drop(inner);
            self.ready.notify_one();
        } else if inner.queue.is_empty() && inner.active.is_empty() {
            drop(inner);
            self.idle.notify_waiters();
        }
    }

    /// Resolves once nothing waits and nothing is being worked on (keys scheduled for
    /// later do not count): what was added so far is done.
    pub async fn idle(&self) {
        loop {
            // Made before looking, so that a `done` in between is not missed.
            let notified = self.idle.notified();
            {
                let inner = self.lock();
                if inner.closed || (inner.queue.is_empty() && inner.active.is_empty()) {
                    return;
                }
            }
            notified.await;
        }
    }

    pub fn close(&self) {
        self.lock().closed = true;
        self.ready.notify_waiters();
        self.idle.notify_waiters();
    }

    pub fn len(&self) -> usize {
        self.lock().queue.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn idle_waits_for_what_was_added_to_be_done_and_for_nothing_more() {
        let q = WorkQueue::new();
        q.idle().await;
        q.add("a");
        q.add("b");
        let waiting = {
            let q = Arc::clone(&q);
            tokio::spawn(async move { q.idle().await })
        };
        let a = q.next().await.unwrap();
        q.done(&a);
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "b still waits");
        let b = q.next().await.unwrap();
        q.add("a");
        q.done(&b);
        let a = q.next().await.unwrap();
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "a is being worked on again");
        q.done(&a);
        waiting.await.unwrap();
    }

    #[tokio::test]
    async fn a_key_waits_once_and_runs_again_if_added_while_active() {
        let q = WorkQueue::new();
        q.add("a");
        q.add("b");
        q.add("a");
        assert_eq!(q.len(), 2);
        let a = q.next().await.unwrap();
        assert_eq!(a, "a");
        q.add("a"); // while active: not handed to a second worker
        assert_eq!(q.next().await.unwrap(), "b");
        assert!(q.is_empty());
        q.done(&"a");
        assert_eq!(q.next().await.unwrap(), "a");
        q.done(&"a");
        q.done(&"b");
        assert!(q.is_empty());
    }

    /// On the real clock (a paused one needs tokio's `test-util`, which would build
    /// tokio and everything on it a second time for the tests), at a scale where the
    /// three schedules are far apart.
    #[tokio::test]
    async fn add_after_keeps_the_soonest_schedule() {
        let q = WorkQueue::new();
        q.add_after("a", Duration::from_millis(1500));
        q.add_after("a", Duration::from_millis(100));
        q.add_after("a", Duration::from_millis(800));
        let started = Instant::now();
        assert_eq!(q.next().await.unwrap(), "a");
        let waited = started.elapsed();
        assert!(waited >= Duration::from_millis(100) && waited < Duration::from_millis(800), "{waited:?}");
        q.done(&"a");
        // Past the later schedules: they were superseded, not queued again.
        let later = tokio::time::timeout(Duration::from_millis(1800), q.next()).await;
        assert!(later.is_err(), "the later timers were superseded");
        assert!(q.is_empty());
    }
}
