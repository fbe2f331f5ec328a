//! The providerID of a KakaoCloud node: `kakaocloud:///<zone>/<instance-id>`.

const SCHEME: &str = "kakaocloud:///";

/// The providerID of instance `instance_id` in `zone`.
pub fn provider_id(zone: &str, instance_id: &str) -> String {
    format!("{SCHEME}{zone}/{instance_id}")
}

/// `(zone, instance id)` of a providerID written by [`provider_id`].
pub fn parse_provider_id(provider_id: &str) -> Option<(&str, &str)> {
    let rest = provider_id.strip_prefix(SCHEME)?;
    let (zone, id) = rest.split_once('/')?;
    (!zone.is_empty() && !id.is_empty() && !id.contains('/')).then_some((zone, id))
}

/// `(zone, instance id)` of the instance `node` runs on, from its `spec.providerID`.
pub fn node_instance(node: &k8s_openapi::api::core::v1::Node) -> Option<(&str, &str)> {
    node.spec
        .as_ref()
        .and_then(|s| s.provider_id.as_deref())
        .and_then(parse_provider_id)
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
