//! Every long-running task of the controller is supervised: they are meant to run until the
//! process stops, so one that returns or panics is a dead controller. The process then exits
//! non-zero (the kubelet restarts the pod, the standby takes the lease) instead of serving with
//! part of its controllers gone while `/healthz` still answers.

use futures::future::select_all;
use tokio::task::JoinHandle;

/// Named tasks that must outlive the process.
#[derive(Debug, Default)]
pub struct Supervisor {
    tasks: Vec<(&'static str, JoinHandle<()>)>,
}

impl Supervisor {
    pub fn spawn(&mut self, name: &'static str, task: impl Future<Output = ()> + Send + 'static) {
        self.tasks.push((name, tokio::spawn(task)));
    }

    /// Takes over an already spawned task.
    pub fn adopt(&mut self, name: &'static str, task: JoinHandle<()>) {
        self.tasks.push((name, task));
    }

    /// Resolves when the first task ends, with its name and how it ended; never resolves
    /// while every task runs (or when there are none).
    pub async fn first_exit(&mut self) -> (&'static str, String) {
        if self.tasks.is_empty() {
            return std::future::pending().await;
        }
        let (outcome, index, _) = select_all(self.tasks.iter_mut().map(|(_, t)| t)).await;
        let (name, _) = self.tasks.remove(index);
        let how = match outcome {
            Ok(()) => "returned".to_owned(),
            Err(e) if e.is_panic() => "panicked".to_owned(),
            Err(e) => format!("was cancelled ({e})"),
        };
        (name, how)
    }

    /// Stops every task.
    pub fn abort_all(&self) {
        for (_, t) in &self.tasks {
            t.abort();
        }
    }
}

impl Drop for Supervisor {
    fn drop(&mut self) {
        self.abort_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_first_task_to_end_is_named() {
        let mut s = Supervisor::default();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        s.spawn("forever", std::future::pending());
        s.spawn("quits", async move {
            let _ = rx.await;
        });
        tx.send(()).unwrap();
        assert_eq!(s.first_exit().await, ("quits", "returned".to_owned()));
    }

    #[tokio::test]
    async fn a_panicking_task_is_reported() {
        let mut s = Supervisor::default();
        s.spawn("forever", std::future::pending());
        s.spawn("broken", async { panic!("bad data") });
        assert_eq!(s.first_exit().await, ("broken", "panicked".to_owned()));
    }

    #[tokio::test]
    async fn nothing_ends_while_every_task_runs() {
        let mut s = Supervisor::default();
        s.spawn("forever", std::future::pending());
        let waited =
            tokio::time::timeout(std::time::Duration::from_millis(50), s.first_exit()).await;
        assert!(waited.is_err());
    }
}
