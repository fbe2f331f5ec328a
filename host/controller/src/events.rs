//! The one events helper every controller publishes through: the reporting controller, the
//! action, a note capped at the API's 1 kB, and a failure to publish logged (never fatal).

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};

/// Events API limit on `note`.
const NOTE_MAX_BYTES: usize = 1024;

/// Publishes Events for one controller action (`Launch`, `Terminate`, `Disrupt`, ...).
#[derive(Clone)]
pub struct Events {
    recorder: Recorder,
    action: &'static str,
}

impl Events {
    pub fn new(recorder: Recorder, action: &'static str) -> Self {
        Events { recorder, action }
    }

    /// A recorder reporting as the `karpenter` controller of this pod (`POD_NAME`).
    pub fn recorder(client: kube::Client) -> Recorder {
        Recorder::new(
            client,
            Reporter {
                controller: "karpenter".into(),
                instance: std::env::var("POD_NAME").ok(),
            },
        )
    }

    pub async fn normal(&self, regarding: &ObjectReference, reason: &str, note: impl Into<String>) {
        self.publish(regarding, EventType::Normal, reason, note.into())
            .await;
    }

    pub async fn warning(
        &self,
        regarding: &ObjectReference,
        reason: &str,
        note: impl Into<String>,
    ) {
        self.publish(regarding, EventType::Warning, reason, note.into())
            .await;
    }

    pub async fn publish(
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
        if let Err(err) = self.recorder.publish(&ev, regarding).await {
            tracing::debug!(error = %err, reason, "could not publish event");
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
}
