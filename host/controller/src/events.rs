//! The one events helper every controller publishes through: the reporting controller, the
//! action, a note capped at the API's 1 kB, and a failure to publish logged (never fatal).
//!
//! Publishing never waits for the API server: like client-go's broadcaster, an Event goes into a
//! bounded queue that a background task drains a few at a time, and a full queue drops the Event
//! (counted in the log) rather than slowing the reconcile that emitted it. A provisioning pass
//! that nominates 1,000 pods would otherwise make 1,000 sequential round trips.
//!
//! kube's `Recorder` keeps every Event it wrote, to count a repeat into the Event's series, and
//! forgets one only when it publishes again six minutes later: after a 20,000-pod scale-out it
//! would hold 20,000 Events until the next one. So each action's writer replaces its recorder
//! after [`RECORDER_EVENTS`] Events, as client-go's correlator keeps at most 4,096; a repeat
//! across a replacement starts a new Event instead of a series.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use tokio::sync::mpsc;

/// Events API limit on `note`.
const NOTE_MAX_BYTES: usize = 1024;
/// Events waiting to be written, per action (client-go's broadcaster queues 1,000).
const QUEUE: usize = 1000;
/// Events written at once, per action.
const IN_FLIGHT: usize = 8;
/// Events one recorder writes before the writer replaces it (and its cache).
const RECORDER_EVENTS: usize = 4096;

/// Who writes Events: the client, and the controller reported as their source.
#[derive(Clone)]
pub struct Source {
    client: kube::Client,
    reporter: Reporter,
}

impl Source {
    pub fn new(client: kube::Client, reporter: Reporter) -> Self {
        Source { client, reporter }
    }

    /// The `karpenter` controller of this pod (`POD_NAME`).
    pub fn karpenter(client: kube::Client) -> Self {
        Source::new(
            client,
            Reporter {
                controller: "karpenter".into(),
                instance: std::env::var("POD_NAME").ok(),
            },
        )
    }

    fn recorder(&self) -> Recorder {
        Recorder::new(self.client.clone(), self.reporter.clone())
    }
}

/// A recorder that is replaced after [`RECORDER_EVENTS`] Events.
struct Bounded {
    source: Source,
    current: Mutex<(Recorder, usize)>,
}

impl Bounded {
    fn new(source: Source) -> Self {
        Bounded {
            current: Mutex::new((source.recorder(), 0)),
            source,
        }
    }

    /// The recorder for the next Event.
    fn next(&self) -> Recorder {
        let mut current = self
            .current
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if current.1 >= RECORDER_EVENTS {
            *current = (self.source.recorder(), 0);
        }
        current.1 += 1;
        current.0.clone()
    }
}

/// Publishes Events for one controller action (`Launch`, `Terminate`, `Disrupt`, ...).
#[derive(Clone)]
pub struct Events {
    queue: mpsc::Sender<(Event, ObjectReference)>,
    action: &'static str,
    /// When each deduplicated Event was last queued, by object, reason and note.
    sent: Arc<Mutex<HashMap<String, Instant>>>,
}

impl Events {
    /// Starts the task that writes this action's Events; it ends when the last clone is dropped.
    /// Must be called inside a Tokio runtime.
    pub fn new(source: Source, action: &'static str) -> Self {
        let (queue, rx) = mpsc::channel::<(Event, ObjectReference)>(QUEUE);
        let pending =
            futures::stream::unfold(rx, |mut rx| async { rx.recv().await.map(|e| (e, rx)) });
        let recorders = Bounded::new(source);
        tokio::spawn(pending.for_each_concurrent(IN_FLIGHT, move |(ev, regarding)| {
            let recorder = recorders.next();
            async move {
                if let Err(err) = recorder.publish(&ev, &regarding).await {
                    tracing::debug!(error = %err, reason = %ev.reason, "could not publish event");
                }
            }
        }));
        Events {
            queue,
            action,
            sent: Arc::default(),
        }
    }

    /// [`Events::publish`], unless the same Event about the same object was queued less than
    /// `every` ago (upstream dedupes its disruption Events the same way, so a pass every 10 s
    /// does not write one per node each time).
    pub fn publish_deduped(
        &self,
        regarding: &ObjectReference,
        type_: EventType,
        reason: &str,
        note: String,
        every: Duration,
    ) {
        let key = format!(
            "{}/{}/{reason}/{note}",
            regarding.kind.as_deref().unwrap_or_default(),
            regarding.name.as_deref().unwrap_or_default()
        );
        {
            let mut sent = self
                .sent
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            sent.retain(|_, at| at.elapsed() < every);
            if sent.contains_key(&key) {
                return;
            }
            sent.insert(key, Instant::now());
        }
        self.publish(regarding, type_, reason, note);
    }

    pub fn normal(&self, regarding: &ObjectReference, reason: &str, note: impl Into<String>) {
        self.publish(regarding, EventType::Normal, reason, note.into());
    }

    pub fn warning(&self, regarding: &ObjectReference, reason: &str, note: impl Into<String>) {
        self.publish(regarding, EventType::Warning, reason, note.into());
    }

    /// Queues the Event; never waits.
    pub fn publish(
        &self,
        regarding: &ObjectReference,
        type_: EventType,
        reason: &str,
        note: String,
    ) {
        let ev = Event {
            type_,
            reason: reason.into(),
            note: Some(truncate(note)),
            action: self.action.into(),
            secondary: None,
        };
        if let Err(mpsc::error::TrySendError::Full(_)) =
            self.queue.try_send((ev, regarding.clone()))
        {
            tracing::debug!(
                reason,
                action = self.action,
                "event queue full; event dropped"
            );
        }
    }
}

/// `note` cut to the API's limit on a character boundary.
fn truncate(mut note: String) -> String {
    if note.len() > NOTE_MAX_BYTES {
        let mut end = NOTE_MAX_BYTES;
        while !note.is_char_boundary(end) {
            end -= 1;
        }
        note.truncate(end);
    }
    note
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notes_are_cut_on_a_character_boundary() {
        assert_eq!(truncate("short".into()), "short");
        let long = "가".repeat(400); // 3 bytes each
        let cut = truncate(long);
        assert!(cut.len() <= NOTE_MAX_BYTES);
        assert!(cut.chars().all(|c| c == '가'));
    }

    #[tokio::test]
    async fn a_writer_replaces_its_recorder_after_a_bound() {
        let config = kube::Config::new("http://127.0.0.1:1".parse().unwrap());
        let source = Source::karpenter(kube::Client::try_from(config).unwrap());
        let recorders = Bounded::new(source);
        let count = |b: &Bounded| b.current.lock().unwrap().1;
        for _ in 0..RECORDER_EVENTS {
            recorders.next();
        }
        assert_eq!(count(&recorders), RECORDER_EVENTS);
        recorders.next();
        assert_eq!(
            count(&recorders),
            1,
            "the next Event goes to a fresh recorder"
        );
    }
}
