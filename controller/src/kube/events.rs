//! Kubernetes Events, published off the reconcile workers.
//!
//! An Event is a create on the API server. Awaited in the reconcile, each one held a
//! worker (and the resource's status write behind it) for a round trip, and 1,000 new
//! Processes sent 1,000 creates at the API server while their statuses waited. Here a
//! reconcile hands its Event to a bounded queue and goes on; a few publishers send
//! them. Like client-go's broadcaster, a full queue drops the Event (counted in
//! `agentplane_events_dropped`): an Event is a note for people, never state.
//! One object's Events always go through the same queue, so they keep their order.

use std::hash::{DefaultHasher, Hash, Hasher};

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, Recorder};
use prometheus_client::metrics::counter::Counter;
use tokio::sync::mpsc;
use tracing::debug;

/// Events sent to the API server at once.
const PUBLISHERS: usize = 4;
/// Events waiting, per publisher.
const CAPACITY: usize = 512;

pub(super) struct Events {
    queues: Vec<mpsc::Sender<(ObjectReference, Event)>>,
    dropped: Counter,
}

impl Events {
    /// Starts the publishers; they stop when this is dropped.
    pub(super) fn start(recorder: Recorder, dropped: Counter) -> Events {
        let queues = (0..PUBLISHERS)
            .map(|_| {
                let (tx, mut rx) = mpsc::channel::<(ObjectReference, Event)>(CAPACITY);
                let recorder = recorder.clone();
                tokio::spawn(async move {
                    while let Some((reference, event)) = rx.recv().await {
                        if let Err(e) = recorder.publish(&event, &reference).await {
                            debug!(reason = %event.reason, error = %e, "cannot publish an event");
                        }
                    }
                });
                tx
            })
            .collect();
        Events { queues, dropped }
    }

    /// Queues `event` about `reference`; never waits.
    pub(super) fn publish(&self, reference: ObjectReference, event: Event) {
        let mut hasher = DefaultHasher::new();
        (&reference.namespace, &reference.name, &reference.uid).hash(&mut hasher);
        let queue = &self.queues[hasher.finish() as usize % self.queues.len()];
        if let Err(e) = queue.try_send((reference, event)) {
            self.dropped.inc();
            debug!(error = %e, "the event queue is full; dropping an event");
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use axum::http::{Request, Response};
    use kube::Resource;
    use kube::client::Body;
    use kube::runtime::events::{EventType, Reporter};
    use serde_json::Value;
    use tokio::sync::Semaphore;

    use super::*;

    /// An API server that answers an Event only as `gate` lets it, and keeps each one.
    fn api_server(gate: Arc<Semaphore>, seen: Arc<Mutex<Vec<Value>>>) -> Recorder {
        let service = tower::service_fn(move |request: Request<Body>| {
            let (gate, seen) = (gate.clone(), seen.clone());
            async move {
                gate.acquire().await.expect("gate").forget();
                let body = request.into_body().collect_bytes().await.expect("body");
                let event: Value = serde_json::from_slice(&body).expect("an Event");
                seen.lock().unwrap().push(event.clone());
                Ok::<_, std::convert::Infallible>(Response::new(Body::from(serde_json::to_vec(&event).unwrap())))
            }
        });
        let reporter = Reporter { controller: "test".into(), instance: None };
        Recorder::new(kube::Client::new(service, "default"), reporter)
    }

    fn about(name: &str) -> ObjectReference {
        let mut pod = k8s_openapi::api::core::v1::Pod::default();
        pod.metadata.name = Some(name.into());
        pod.metadata.namespace = Some("default".into());
        pod.metadata.uid = Some(format!("uid-{name}"));
        pod.object_ref(&())
    }

    /// Each reason its own: the recorder sends a repeated one as a patch of the first.
    fn event(reason: String) -> Event {
        Event { type_: EventType::Normal, reason, note: None, action: "Start".into(), secondary: None }
    }

    fn reasons_about(seen: &Mutex<Vec<Value>>, name: &str) -> Vec<String> {
        let seen = seen.lock().unwrap();
        seen.iter()
            .filter(|e| e["regarding"]["name"] == name)
            .map(|e| e["reason"].as_str().unwrap().to_string())
            .collect()
    }

    #[tokio::test]
    async fn a_full_queue_drops_and_counts_and_one_object_s_events_keep_their_order() {
        let gate = Arc::new(Semaphore::new(0));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let dropped = Counter::default();
        let events = Events::start(api_server(gate.clone(), seen.clone()), dropped.clone());
        // Published without a yield: one object's queue takes CAPACITY, the rest are
        // dropped, and publishing never waited for the API server.
        for n in 0..CAPACITY + 40 {
            events.publish(about("a"), event(format!("a{n}")));
        }
        assert_eq!(dropped.get(), 40);
        gate.add_permits(CAPACITY);
        let want: Vec<String> = (0..CAPACITY).map(|n| format!("a{n}")).collect();
        let sent = async {
            while reasons_about(&seen, "a").len() < CAPACITY {
                tokio::task::yield_now().await;
            }
        };
        tokio::time::timeout(std::time::Duration::from_secs(30), sent).await.expect("every queued Event sent");
        assert_eq!(reasons_about(&seen, "a"), want, "in the order they were published");
        assert_eq!(dropped.get(), 40);
    }
}
