//! Every well-known name the project reads or writes on Kubernetes objects, defined once
//! (like upstream Karpenter's `pkg/apis/v1/labels.go`).
//!
//! Invariant: no other module spells one of these strings. A test in the host's integration
//! binary (`layout`) greps the host crates for the prefixes below and fails on a second copy,
//! because a copy that drifts is how a controller ends up watching a label nothing sets.

/// Labels on Nodes and NodeClaims (and the keys NodePool requirements may use).
pub mod label {
    pub const ZONE: &str = "topology.kubernetes.io/zone";
    pub const REGION: &str = "topology.kubernetes.io/region";
    pub const INSTANCE_TYPE: &str = "node.kubernetes.io/instance-type";
    pub const ARCH: &str = "kubernetes.io/arch";
    pub const OS: &str = "kubernetes.io/os";
    pub const HOSTNAME: &str = "kubernetes.io/hostname";
    pub const WINDOWS_BUILD: &str = "node.kubernetes.io/windows-build";
    pub const CAPACITY_TYPE: &str = "karpenter.sh/capacity-type";
    /// The owning NodePool, on NodeClaims and Nodes.
    pub const NODEPOOL: &str = "karpenter.sh/nodepool";
    /// Set once the Node registered / initialized (upstream's labels).
    pub const REGISTERED: &str = "karpenter.sh/registered";
    pub const INITIALIZED: &str = "karpenter.sh/initialized";
    /// The Kubernetes Engine node-pool label the install guide selects on.
    pub const KKE_NODEPOOL: &str = "kakaoi.io/kke-nodepool";
    /// The KCNodeClass a node was launched from.
    pub const NODECLASS: &str = "karpenter.kakaocloud.com/kcnodeclass";
    /// Which NodeClaim a Node belongs to: the kubelet sets it from the userdata's node labels,
    /// so controllers map a Node event to its NodeClaim before the providerID is matched.
    pub const NODECLAIM: &str = "karpenter.kakaocloud.com/nodeclaim";
    pub const INSTANCE_FAMILY: &str = "karpenter.kakaocloud.com/instance-family";
    pub const INSTANCE_SIZE: &str = "karpenter.kakaocloud.com/instance-size";
    pub const INSTANCE_CPU: &str = "karpenter.kakaocloud.com/instance-cpu";
    pub const INSTANCE_MEMORY: &str = "karpenter.kakaocloud.com/instance-memory";
    pub const INSTANCE_GPU_COUNT: &str = "karpenter.kakaocloud.com/instance-gpu-count";
    pub const INSTANCE_GPU_NAME: &str = "karpenter.kakaocloud.com/instance-gpu-name";
    /// The KakaoCloud flavor ID behind an instance type (launch needs the ID, not the name).
    pub const FLAVOR_ID: &str = "karpenter.kakaocloud.com/flavor-id";
    /// On a Node: Karpenter leaves its taints alone at registration.
    pub const DO_NOT_SYNC_TAINTS: &str = "karpenter.sh/do-not-sync-taints";
    /// Which world a plugin ConfigMap implements.
    pub const PLUGIN_WORLD: &str = "karpenter.kakaocloud.com/plugin-world";
    /// On a plugin ConfigMap: `shadow` runs it beside the active plugin without acting
    /// ([`PLUGIN_MODE_SHADOW`]); absent, it is the active plugin of its world.
    pub const PLUGIN_MODE: &str = "karpenter.kakaocloud.com/plugin-mode";
    pub const PLUGIN_MODE_SHADOW: &str = "shadow";
    /// `nodepool`: it serves only the NodePools that name it ([`crate::names::annotation`]'s
    /// `NODEPOOL_*` keys), never as its world's default.
    pub const PLUGIN_MODE_NODEPOOL: &str = "nodepool";
    /// Set on a Node while it drains, so load balancers stop sending it traffic (as upstream).
    pub const EXCLUDE_FROM_LOAD_BALANCERS: &str =
        "node.kubernetes.io/exclude-from-external-load-balancers";

    /// Labels every node has whether or not a NodePool mentions them: a pod may constrain them
    /// even when the NodePool leaves them open (Karpenter's "well-known labels").
    pub const WELL_KNOWN: [&str; 8] = [
        ZONE,
        REGION,
        INSTANCE_TYPE,
        ARCH,
        OS,
        HOSTNAME,
        CAPACITY_TYPE,
        WINDOWS_BUILD,
    ];
}

/// Annotations.
pub mod annotation {
    /// On a pod or node: keep it from voluntary disruption.
    pub const DO_NOT_DISRUPT: &str = "karpenter.sh/do-not-disrupt";
    /// The NodePool template hash, on NodePools and the NodeClaims made from them.
    pub const NODEPOOL_HASH: &str = "karpenter.sh/nodepool-hash";
    /// Version of the hash algorithm; hashes of different versions are not compared.
    pub const NODEPOOL_HASH_VERSION: &str = "karpenter.sh/nodepool-hash-version";
    /// The KCNodeClass spec hash, on KCNodeClasses and the NodeClaims launched from them.
    pub const NODECLASS_HASH: &str = "karpenter.kakaocloud.com/kcnodeclass-hash";
    /// Subnet the instance was launched in (set at launch).
    pub const SUBNET: &str = "karpenter.kakaocloud.com/subnet-id";
    /// Comma-separated security-group IDs the instance was launched with.
    pub const SECURITY_GROUPS: &str = "karpenter.kakaocloud.com/security-group-ids";
    /// sha256 of a plugin ConfigMap's component.
    pub const PLUGIN_SHA256: &str = "karpenter.kakaocloud.com/plugin-sha256";
    /// `<keyID>:<base64 ed25519 signature>` of a plugin ConfigMap (see [`crate::plugin_signing`]).
    pub const PLUGIN_SIGNATURE: &str = "karpenter.kakaocloud.com/plugin-signature";
    /// On a NodePool: the plugin ConfigMap that ranks instance types for its nodes (absent: the
    /// world's default plugin).
    pub const NODEPOOL_INSTANCE_SELECTOR: &str =
        "plugins.karpenter.kakaocloud.com/instance-selector";
    /// On a NodePool: the plugin ConfigMap that scores its nodes for consolidation.
    pub const NODEPOOL_CONSOLIDATION_SCORER: &str =
        "plugins.karpenter.kakaocloud.com/consolidation-scorer";
    /// On a NodePool: the plugin ConfigMap that renders its nodes' userdata.
    pub const NODEPOOL_USERDATA_RENDERER: &str =
        "plugins.karpenter.kakaocloud.com/userdata-renderer";
    /// On a terminating NodeClaim and its Node: when its terminationGracePeriod ends (RFC 3339).
    pub const NODECLAIM_TERMINATION_TIMESTAMP: &str =
        "karpenter.sh/nodeclaim-termination-timestamp";
    /// kubectl's copy of the last applied object (dropped from the controller's caches).
    pub const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";
    /// Marks a static (mirror) pod.
    pub const MIRROR_POD: &str = "kubernetes.io/config.mirror";
    /// The ReplicaSet controller's preference for which pod to remove first.
    pub const POD_DELETION_COST: &str = "controller.kubernetes.io/pod-deletion-cost";
}

/// Taint keys.
pub mod taint {
    /// Put on a node being disrupted (NoSchedule), so nothing new lands there.
    pub const DISRUPTED: &str = "karpenter.sh/disrupted";
    /// Put on a node at registration until Karpenter has synced it (NoExecute).
    pub const UNREGISTERED: &str = "karpenter.sh/unregistered";
    /// Cilium's agent removes it when the node's networking is up (a startup taint).
    pub const CILIUM_AGENT_NOT_READY: &str = "node.cilium.io/agent-not-ready";
    /// Taints the node lifecycle controller and cloud controllers add and remove on their own;
    /// they never count as a node's own taints.
    pub const NOT_READY: &str = "node.kubernetes.io/not-ready";
    pub const UNREACHABLE: &str = "node.kubernetes.io/unreachable";
    pub const UNINITIALIZED: &str = "node.cloudprovider.kubernetes.io/uninitialized";
    pub const EPHEMERAL: [&str; 3] = [NOT_READY, UNREACHABLE, UNINITIALIZED];
}

/// Finalizers.
pub mod finalizer {
    /// On NodeClaims and Nodes: drain and delete the instance before the object goes.
    pub const TERMINATION: &str = "karpenter.sh/termination";
    /// On KCNodeClasses while NodeClaims use them.
    pub const NODECLASS: &str = "karpenter.kakaocloud.com/termination";
}

/// Condition types.
pub mod condition {
    pub const READY: &str = "Ready";
    /// NodeClaim phases.
    pub const LAUNCHED: &str = "Launched";
    pub const REGISTERED: &str = "Registered";
    pub const INITIALIZED: &str = "Initialized";
    /// NodeClaim disruption state, each present only while it holds (as upstream).
    pub const DRIFTED: &str = "Drifted";
    pub const CONSOLIDATABLE: &str = "Consolidatable";
    /// Why a disruption command holds the NodeClaim (Underutilized, Empty, Drifted, Expired).
    pub const DISRUPTION_REASON: &str = "DisruptionReason";
    /// NodeClaim termination phases.
    pub const DRAINED: &str = "Drained";
    pub const VOLUMES_DETACHED: &str = "VolumesDetached";
    pub const INSTANCE_TERMINATING: &str = "InstanceTerminating";
    /// NodePool parts (`Ready` is ValidationSucceeded and NodeClassReady, as upstream).
    pub const VALIDATION_SUCCEEDED: &str = "ValidationSucceeded";
    pub const NODECLASS_READY: &str = "NodeClassReady";
    pub const NODE_REGISTRATION_HEALTHY: &str = "NodeRegistrationHealthy";
    /// KCNodeClass parts.
    pub const KUBERNETES_VERSION_READY: &str = "KubernetesVersionReady";
    pub const IMAGES_READY: &str = "ImagesReady";
    pub const SUBNETS_READY: &str = "SubnetsReady";
    pub const SECURITY_GROUPS_READY: &str = "SecurityGroupsReady";
    pub const KEY_PAIR_READY: &str = "KeyPairReady";
}

/// The only capacity type KakaoCloud sells (no spot market).
pub const CAPACITY_TYPE_ON_DEMAND: &str = "on-demand";
