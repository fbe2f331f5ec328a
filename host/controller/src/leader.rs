//! Leader election on a `coordination.k8s.io/v1` Lease, the way client-go does it: the holder
//! renews `renewTime` every retry period; a candidate takes the Lease over once it has seen the
//! same record unchanged for the lease duration (measured on its own clock, so clock skew
//! between replicas does not matter) or when the holder released it (empty holder). Every
//! write is a replace with the read `resourceVersion`, so two candidates never both win.
//!
//! **Fencing.** The elector keeps a [`Fence`] open until `renewal sent + renew deadline` after
//! each successful renewal, timed from *before* the request left, while a standby cannot take
//! over before `that renewal + lease duration` (it measures from when it saw the record, which is
//! later). The controllers' KakaoCloud client checks the fence before every call, so a leader
//! whose renewals hang (a partition) stops calling the cloud by the renew deadline, before the
//! standby can lead, whatever its controllers and retry loops still have queued; [`Elector::hold`]
//! returns by then too and the process exits.
//!
//! (`kube-leader-election` 0.44 needs kube 4; the workspace is on kube 5.)

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kakaocloud::Fence;
use kube::api::{Api, ObjectMeta, PostParams};
use tokio::sync::watch;
use tokio::time::Instant;

/// Which Lease, who we are, and the timings (client-go's defaults: 15 s, 10 s, 2 s).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderConfig {
    pub name: String,
    pub namespace: String,
    pub identity: String,
    pub lease_duration: Duration,
    /// The leader gives up when it could not renew for this long.
    pub renew_deadline: Duration,
    pub retry_period: Duration,
}

impl Default for LeaderConfig {
    fn default() -> Self {
        LeaderConfig {
            name: "karpenter-leader-election".into(),
            namespace: "kube-system".into(),
            identity: String::new(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

/// One candidate. [`Elector::try_acquire_or_renew`] is one round; [`Elector::run`] loops.
pub struct Elector {
    api: Api<Lease>,
    config: LeaderConfig,
    /// The last record seen (holder and renew time) and when it was first seen.
    observed: Option<(String, Instant)>,
    /// When the last successful acquire or renewal was sent.
    renewed: Option<Instant>,
    fence: Fence,
}

fn record_key(spec: &LeaseSpec) -> String {
    format!(
        "{}|{:?}|{:?}",
        spec.holder_identity.as_deref().unwrap_or(""),
        spec.renew_time.as_ref().map(|t| t.0),
        spec.lease_transitions
    )
}

fn now() -> MicroTime {
    MicroTime(jiff::Timestamp::now())
}

fn is_conflict(err: &kube::Error) -> bool {
    matches!(err, kube::Error::Api(s) if s.code == 409)
}

impl Elector {
    pub fn new(client: kube::Client, config: LeaderConfig) -> Elector {
        Elector {
            api: Api::namespaced(client, &config.namespace),
            config,
            observed: None,
            renewed: None,
            fence: Fence::closed(),
        }
    }

    /// The fence this elector keeps open while its leadership is certain.
    pub fn fence(&self) -> Fence {
        self.fence.clone()
    }

    /// When the fence closes (closed) unless a renewal succeeds first.
    pub fn fenced_at(&self) -> Option<Instant> {
        self.renewed.map(|sent| sent + self.config.renew_deadline)
    }

    /// One round, timed for the fence: the deadline counts from before the request left.
    async fn round(&mut self) -> Result<bool, kube::Error> {
        let sent = Instant::now();
        let held = self.try_acquire_or_renew().await;
        match held {
            Ok(true) => {
                self.renewed = Some(sent);
                self.fence
                    .open_until((sent + self.config.renew_deadline).into_std());
            }
            Ok(false) => self.fence.close(),
            Err(_) => {}
        }
        held
    }

    fn spec(&self, previous: Option<&LeaseSpec>) -> LeaseSpec {
        let me = &self.config.identity;
        let (acquire, transitions) = match previous {
            Some(p) if p.holder_identity.as_deref() == Some(me.as_str()) => {
                (p.acquire_time.clone(), p.lease_transitions.unwrap_or(0))
            }
            Some(p) => (Some(now()), p.lease_transitions.unwrap_or(0) + 1),
            None => (Some(now()), 0),
        };
        LeaseSpec {
            holder_identity: Some(me.clone()),
            lease_duration_seconds: Some(self.config.lease_duration.as_secs().max(1) as i32),
            acquire_time: acquire,
            renew_time: Some(now()),
            lease_transitions: Some(transitions),
            ..Default::default()
        }
    }

    /// One round: creates the Lease, renews it, or takes it over when it expired. `Ok(true)` when
    /// we hold it afterwards.
    pub async fn try_acquire_or_renew(&mut self) -> Result<bool, kube::Error> {
        let me = self.config.identity.clone();
        let Some(mut lease) = self.api.get_opt(&self.config.name).await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.config.name.clone()),
                    namespace: Some(self.config.namespace.clone()),
                    ..Default::default()
                },
                spec: Some(self.spec(None)),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(created) => {
                    self.observe(created.spec.as_ref());
                    Ok(true)
                }
                Err(e) if is_conflict(&e) => Ok(false),
                Err(e) => Err(e),
            };
        };
        let previous = lease.spec.clone().unwrap_or_default();
        self.observe(Some(&previous));
        let holder = previous.holder_identity.as_deref().unwrap_or("");
        if !holder.is_empty() && holder != me {
            let duration = previous
                .lease_duration_seconds
                .map(|s| Duration::from_secs(s.max(1) as u64))
                .unwrap_or(self.config.lease_duration);
            let seen_since = self.observed.as_ref().map(|(_, at)| *at);
            if seen_since.is_some_and(|at| at.elapsed() < duration) {
                return Ok(false);
            }
            tracing::info!(lease = %self.config.name, previous = %holder, "lease expired, taking over");
        }
        lease.spec = Some(self.spec(Some(&previous)));
        match self
            .api
            .replace(&self.config.name, &PostParams::default(), &lease)
            .await
        {
            Ok(updated) => {
                self.observe(updated.spec.as_ref());
                Ok(true)
            }
            Err(e) if is_conflict(&e) => Ok(false),
            Err(e) => Err(e),
        }
    }

    fn observe(&mut self, spec: Option<&LeaseSpec>) {
        let key = spec.map(record_key).unwrap_or_default();
        if self.observed.as_ref().is_none_or(|(k, _)| *k != key) {
            self.observed = Some((key, Instant::now()));
        }
    }

    /// Gives the Lease up (holder emptied) if we still hold it, so a standby takes over at once.
    pub async fn release(&mut self) -> Result<(), kube::Error> {
        self.fence.close();
        let Some(mut lease) = self.api.get_opt(&self.config.name).await? else {
            return Ok(());
        };
        let Some(spec) = lease.spec.as_mut() else {
            return Ok(());
        };
        if spec.holder_identity.as_deref() != Some(self.config.identity.as_str()) {
            return Ok(());
        }
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(now());
        match self
            .api
            .replace(&self.config.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if is_conflict(&e) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Blocks until this candidate holds the Lease.
    pub async fn acquire(&mut self) {
        loop {
            match self.round().await {
                Ok(true) => {
                    tracing::info!(lease = %self.config.name, identity = %self.config.identity, "successfully acquired lease");
                    return;
                }
                Ok(false) => {}
                Err(e) => {
                    tracing::warn!(lease = %self.config.name, error = %e, "error acquiring lease")
                }
            }
            tokio::time::sleep(self.config.retry_period).await;
        }
    }

    /// While leading: renews every retry period; returns (why) once leadership is lost, that is,
    /// when another holder shows up or no renewal succeeded by the renew deadline (the moment
    /// the fence closes; a renewal still hanging then is abandoned).
    pub async fn hold(&mut self) -> String {
        loop {
            tokio::time::sleep(self.config.retry_period).await;
            let deadline = self.fenced_at().unwrap_or_else(Instant::now);
            match tokio::time::timeout_at(deadline, self.round()).await {
                Ok(Ok(true)) => {}
                Ok(Ok(false)) => return "another candidate holds the lease".into(),
                Ok(Err(e)) => {
                    tracing::warn!(lease = %self.config.name, error = %e, "failed to renew lease")
                }
                Err(_) => tracing::warn!(lease = %self.config.name, "renewing the lease timed out"),
            }
            if Instant::now() >= deadline {
                self.fence.close();
                return format!(
                    "could not renew the lease within {:?}",
                    self.config.renew_deadline
                );
            }
        }
    }
}

/// How a background election ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ended {
    /// Leadership was lost (the reason); the process must stop its controllers.
    Lost(String),
    /// [`Election::stop`] was called; the Lease was released if we held it.
    Stopped,
}

/// A candidate running in the background.
pub struct Election {
    /// True while leading.
    pub leading: watch::Receiver<bool>,
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<Ended>,
}

impl Election {
    /// Waits until leading; `false` if the election ended first.
    pub async fn wait_leading(&mut self) -> bool {
        self.leading.wait_for(|l| *l).await.is_ok()
    }

    /// Resolves when the election ends by itself (leadership lost).
    pub async fn ended(&mut self) -> Ended {
        (&mut self.task)
            .await
            .unwrap_or_else(|e| Ended::Lost(e.to_string()))
    }

    /// Stops campaigning and releases the Lease if held, so a standby takes over at once.
    pub async fn stop(self) -> Ended {
        let _ = self.stop.send(true);
        self.task
            .await
            .unwrap_or_else(|e| Ended::Lost(e.to_string()))
    }
}

/// Starts campaigning in the background: acquire, then renew until lost or stopped.
pub fn spawn(mut elector: Elector) -> Election {
    let (leading_tx, leading) = watch::channel(false);
    let (stop, mut stop_rx) = watch::channel(false);
    let task = tokio::spawn(async move {
        let stopped = async move {
            let _ = stop_rx.wait_for(|s| *s).await;
        };
        tokio::pin!(stopped);
        tokio::select! {
            _ = elector.acquire() => {}
            _ = &mut stopped => return Ended::Stopped,
        }
        let _ = leading_tx.send(true);
        let ended = tokio::select! {
            why = elector.hold() => Ended::Lost(why),
            _ = &mut stopped => {
                if let Err(e) = elector.release().await {
                    tracing::warn!(error = %e, "could not release the lease");
                }
                Ended::Stopped
            }
        };
        let _ = leading_tx.send(false);
        ended
    });
    Election {
        leading,
        stop,
        task,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(identity: &str, namespace: &str) -> LeaderConfig {
        LeaderConfig {
            name: "karpenter-leader-election".into(),
            namespace: namespace.into(),
            identity: identity.into(),
            lease_duration: Duration::from_secs(2),
            renew_deadline: Duration::from_millis(1500),
            retry_period: Duration::from_millis(200),
        }
    }

    async fn holder(api: &Api<Lease>) -> Option<String> {
        api.get("karpenter-leader-election")
            .await
            .unwrap()
            .spec
            .and_then(|s| s.holder_identity)
    }

    /// On the shared control plane: create, renew, standby refused while the holder renews,
    /// take-over after expiry (transitions counted), the deposed leader notices, release.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn acquire_renew_take_over_release() {
        kakaocloud::install_crypto_provider();
        let cp = controlplane::shared().await;
        let ns = cp.fresh_namespace("lease").await.unwrap();
        let client = cp.client().await;
        let api: Api<Lease> = Api::namespaced(client.clone(), &ns);
        let mut a = Elector::new(client.clone(), config("a", &ns));
        let mut b = Elector::new(client.clone(), config("b", &ns));

        assert!(
            a.try_acquire_or_renew().await.unwrap(),
            "a creates the lease"
        );
        assert!(!b.try_acquire_or_renew().await.unwrap(), "b stands by");
        for _ in 0..5 {
            tokio::time::sleep(Duration::from_millis(500)).await;
            assert!(a.try_acquire_or_renew().await.unwrap(), "a renews");
            assert!(
                !b.try_acquire_or_renew().await.unwrap(),
                "held while renewed"
            );
        }
        assert_eq!(holder(&api).await.as_deref(), Some("a"));

        // a stops renewing (killed): b takes over once it saw the record unchanged for 2 s.
        let started = Instant::now();
        b.acquire().await;
        let waited = started.elapsed();
        assert!(
            waited >= Duration::from_millis(1500) && waited < Duration::from_secs(4),
            "took over after {waited:?}"
        );
        let lease = api.get("karpenter-leader-election").await.unwrap();
        let spec = lease.spec.unwrap();
        assert_eq!(spec.holder_identity.as_deref(), Some("b"));
        assert_eq!(spec.lease_transitions, Some(1));

        // a comes back: it is not the holder any more, and hold() would report the loss.
        assert!(!a.try_acquire_or_renew().await.unwrap());

        // b releases: a takes over at once (empty holder).
        b.release().await.unwrap();
        assert_eq!(holder(&api).await, None);
        assert!(a.try_acquire_or_renew().await.unwrap());
        assert_eq!(holder(&api).await.as_deref(), Some("a"));
    }

    /// Two candidates racing for a fresh lease: exactly one wins each round.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn racing_candidates_never_both_lead() {
        kakaocloud::install_crypto_provider();
        let cp = controlplane::shared().await;
        let ns = cp.fresh_namespace("lease-race").await.unwrap();
        let client = cp.client().await;
        let mut a = Elector::new(client.clone(), config("a", &ns));
        let mut b = Elector::new(client.clone(), config("b", &ns));
        for _ in 0..10 {
            let (ra, rb) = tokio::join!(a.try_acquire_or_renew(), b.try_acquire_or_renew());
            let (ra, rb) = (ra.unwrap(), rb.unwrap());
            assert!(!(ra && rb), "both think they lead");
            assert!(ra || rb, "nobody leads");
        }
    }

    /// The leader whose lease is taken over returns from hold() within the renew deadline.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn deposed_leader_notices() {
        kakaocloud::install_crypto_provider();
        let cp = controlplane::shared().await;
        let ns = cp.fresh_namespace("lease-depose").await.unwrap();
        let client = cp.client().await;
        let api: Api<Lease> = Api::namespaced(client.clone(), &ns);
        let mut a = Elector::new(client.clone(), config("a", &ns));
        assert!(a.try_acquire_or_renew().await.unwrap());
        let mut election = spawn(a);
        assert!(election.wait_leading().await);
        // Someone else writes themselves in (as a take-over would).
        for attempt in 0.. {
            let mut lease = api.get("karpenter-leader-election").await.unwrap();
            lease.spec.as_mut().unwrap().holder_identity = Some("intruder".into());
            match api
                .replace("karpenter-leader-election", &PostParams::default(), &lease)
                .await
            {
                Ok(_) => break,
                Err(e) if is_conflict(&e) && attempt < 10 => continue,
                Err(e) => panic!("{e}"),
            }
        }
        let ended = tokio::time::timeout(Duration::from_secs(3), election.ended())
            .await
            .expect("noticed in time");
        assert!(
            matches!(&ended, Ended::Lost(why) if why.contains("another candidate")),
            "{ended:?}"
        );
        assert!(!*election.leading.borrow());
    }

    /// The leader's renewals hang (a proxy holds them): its fence closes by the renew deadline
    /// after the last renewal was sent, hold() returns by then, and a standby acquires only
    /// later.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_partitioned_leader_is_fenced_before_a_standby_can_lead() {
        kakaocloud::install_crypto_provider();
        let cp = controlplane::shared().await;
        let ns = cp.fresh_namespace("lease-fence").await.unwrap();
        let apiserver: std::net::SocketAddr = cp
            .server_url()
            .trim_start_matches("https://")
            .trim_end_matches('/')
            .parse()
            .unwrap();
        let proxy = kk_demo::Proxy::start(apiserver).await.unwrap();
        let kubeconfig = kube::config::Kubeconfig::read_from(cp.kubeconfig_path()).unwrap();
        let mut via_proxy = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
            .await
            .unwrap();
        via_proxy.cluster_url = format!("https://{}", proxy.addr).parse().unwrap();
        let mut a = Elector::new(kube::Client::try_from(via_proxy).unwrap(), config("a", &ns));
        let fence = a.fence();
        assert!(!fence.is_open(), "closed before leading");
        a.acquire().await;
        assert!(fence.is_open());
        let mut b = Elector::new(cp.client().await, config("b", &ns));

        proxy.partition();
        let held = tokio::spawn(async move {
            let why = a.hold().await;
            (why, a)
        });
        b.acquire().await;
        let (why, a) = held.await.unwrap();
        assert!(why.contains("could not renew"), "{why}");
        assert!(!fence.is_open());
        // The fence closed before the standby even sent the write that made it leader.
        let (closed, acquiring) = (a.fenced_at().unwrap(), b.renewed.unwrap());
        assert!(
            closed < acquiring,
            "the standby acquired {:?} before the leader's fence closed",
            closed - acquiring
        );
    }

    /// Stopping a leading election releases the Lease.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn stop_releases() {
        kakaocloud::install_crypto_provider();
        let cp = controlplane::shared().await;
        let ns = cp.fresh_namespace("lease-stop").await.unwrap();
        let client = cp.client().await;
        let api: Api<Lease> = Api::namespaced(client.clone(), &ns);
        let mut election = spawn(Elector::new(client.clone(), config("a", &ns)));
        assert!(election.wait_leading().await);
        assert_eq!(holder(&api).await.as_deref(), Some("a"));
        assert_eq!(election.stop().await, Ended::Stopped);
        assert_eq!(holder(&api).await, None);
    }
}
