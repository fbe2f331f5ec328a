//! The NodeClaim lifecycle: launch (instance, userdata, bootstrap token, ownership tag),
//! registration (match the Node by providerID, sync labels and taints, drop the unregistered
//! taint), initialization (startup taints gone, node Ready) and liveness (claims that never
//! register, or whose instance failed, are deleted so their pods are provisioned again).

pub mod bootstrap;
pub mod controller;
pub mod userdata;

pub use controller::{CILIUM_AGENT_NOT_READY, JoinInfo, Lifecycle, LifecycleError};
pub use userdata::{KubeadmRenderer, UserdataError, UserdataInput, UserdataRenderer};

/// `kakaocloud:///<zone>/<instance-id>`, the providerID of a KakaoCloud node.
pub fn provider_id(zone: &str, instance_id: &str) -> String {
    format!("kakaocloud:///{zone}/{instance_id}")
}

/// `(zone, instance id)` of a providerID written by [`provider_id`].
pub fn parse_provider_id(provider_id: &str) -> Option<(&str, &str)> {
    let rest = provider_id.strip_prefix("kakaocloud:///")?;
    let (zone, id) = rest.split_once('/')?;
    (!zone.is_empty() && !id.is_empty() && !id.contains('/')).then_some((zone, id))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn provider_ids_round_trip() {
        let p = provider_id("kr-central-2-a", "abc-123");
        assert_eq!(p, "kakaocloud:///kr-central-2-a/abc-123");
        assert_eq!(parse_provider_id(&p), Some(("kr-central-2-a", "abc-123")));
        assert_eq!(parse_provider_id("aws:///x/y"), None);
        assert_eq!(parse_provider_id("kakaocloud:///x"), None);
        assert_eq!(parse_provider_id("kakaocloud:///x/y/z"), None);
    }
}
