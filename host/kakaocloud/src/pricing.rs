//! On-demand hourly prices of KakaoCloud instance types, in KRW.
//!
//! The flavor API returns no price, so the controller needs a table. These
//! figures are illustrative (see `docs/kakaocloud-api.md`): they keep the
//! families' relative order (t1i < c2a < m2a < r2a per vCPU, GPUs far above)
//! and must be replaced by the published price list before real use. The
//! simulator builds its catalog from this same table.

/// `(flavor name, KRW per hour)`.
pub const HOURLY_KRW: &[(&str, u64)] = &[
    ("t1i.micro", 26),
    ("t1i.small", 30),
    ("t1i.medium", 60),
    ("t1i.large", 76),
    ("m2a.large", 96),
    ("m2a.xlarge", 192),
    ("m2a.2xlarge", 384),
    ("m2a.4xlarge", 768),
    ("m2a.8xlarge", 1536),
    ("c2a.large", 79),
    ("c2a.xlarge", 159),
    ("c2a.2xlarge", 319),
    ("c2a.4xlarge", 638),
    ("r2a.large", 136),
    ("r2a.xlarge", 272),
    ("r2a.2xlarge", 544),
    ("r2a.4xlarge", 1088),
    ("gn1i.xlarge", 1142),
    ("gn1i.2xlarge", 1334),
    ("gn1i.4xlarge", 2668),
    ("p2i.6xlarge", 5280),
];

/// Hourly on-demand price of `flavor`, if the table knows it.
pub fn hourly_price_krw(flavor: &str) -> Option<u64> {
    HOURLY_KRW
        .iter()
        .find(|(name, _)| *name == flavor)
        .map(|(_, price)| *price)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_and_unknown_flavors() {
        assert!(hourly_price_krw("m2a.large").is_some());
        assert!(hourly_price_krw("m2a.2xlarge") > hourly_price_krw("m2a.large"));
        assert_eq!(hourly_price_krw("x9.huge"), None);
    }
}
