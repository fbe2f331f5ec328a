//! Deterministic instance names.
//!
//! The name is a pure function of (cluster identifier, NodeClaim name), so a
//! create whose outcome is unknown can be checked by listing that name, and a
//! restarted controller finds what it launched. KakaoCloud accepts 4..=63
//! characters of `[A-Za-z0-9_-]`, starting and ending alphanumeric, without
//! `--`, `__`, `-_` or `_-`.
//!
//! Invariant: different (cluster, NodeClaim) pairs never share a name. The readable part
//! alone is ambiguous (`prod` + `eu-web-x1` and `prod-eu` + `web-x1` both read
//! `kk-prod-eu-web-x1`), so every name ends with a hash of the exact pair.

use sha2::{Digest, Sha256};

use super::api::{INSTANCE_NAME_MAX, INSTANCE_NAME_MIN};

const PREFIX: &str = "kk";
const HASH_LEN: usize = 8;

/// Instance name for `nodeclaim` of `cluster`: a readable prefix (cut to fit) and a short
/// hash of the exact inputs, so two different pairs cannot end up with the same name.
pub fn instance_name(cluster: &str, nodeclaim: &str) -> String {
    let readable = format!("{PREFIX}-{}-{}", sanitize(cluster), sanitize(nodeclaim));
    let readable = collapse(&readable);
    let digest = Sha256::digest(format!("{cluster}\0{nodeclaim}").as_bytes());
    let hash = &hex::encode(digest)[..HASH_LEN];
    let room = INSTANCE_NAME_MAX - HASH_LEN - 1;
    let mut head: String = readable.chars().take(room).collect();
    while head.ends_with('-') {
        head.pop();
    }
    format!("{head}-{hash}")
}

/// Whether `name` is a valid KakaoCloud instance name.
pub fn is_valid_instance_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    (INSTANCE_NAME_MIN..=INSTANCE_NAME_MAX).contains(&bytes.len())
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || *b == b'-' || *b == b'_')
        && bytes.first().is_some_and(u8::is_ascii_alphanumeric)
        && bytes.last().is_some_and(u8::is_ascii_alphanumeric)
        && !["--", "__", "-_", "_-"]
            .iter()
            .any(|bad| name.contains(bad))
}

fn sanitize(part: &str) -> String {
    part.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect()
}

fn collapse(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if c == '-' && out.ends_with('-') {
            continue;
        }
        out.push(c);
    }
    out.trim_end_matches('-').to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn simple_names_stay_readable() {
        let name = instance_name("prod", "default-abc12");
        assert!(name.starts_with("kk-prod-default-abc12-"), "{name}");
        assert!(is_valid_instance_name(&name), "{name}");
    }

    #[test]
    fn clusters_whose_names_join_alike_never_collide() {
        let a = instance_name("prod", "eu-web-x1");
        let b = instance_name("prod-eu", "web-x1");
        assert_ne!(
            a, b,
            "a cluster's instance must never carry another cluster's name"
        );
        assert_eq!(a, instance_name("prod", "eu-web-x1"), "deterministic");
    }

    #[test]
    fn altered_or_long_names_get_a_hash_and_stay_valid() {
        let a = instance_name("prod", "pool.a-x");
        let b = instance_name("prod", "pool-a-x");
        assert_ne!(a, b);
        assert!(is_valid_instance_name(&a), "{a}");
        let long = instance_name("cluster-with-a-long-name", &"n".repeat(200));
        assert_eq!(long.len(), INSTANCE_NAME_MAX);
        assert!(is_valid_instance_name(&long), "{long}");
        assert_eq!(
            long,
            instance_name("cluster-with-a-long-name", &"n".repeat(200))
        );
        let weird = instance_name("--", "..--..");
        assert!(is_valid_instance_name(&weird), "{weird}");
    }

    #[test]
    fn validator_matches_the_service_rules() {
        assert!(is_valid_instance_name("kk-a-b"));
        assert!(!is_valid_instance_name("kk--a"));
        assert!(!is_valid_instance_name("-kka"));
        assert!(!is_valid_instance_name("abc"));
        assert!(!is_valid_instance_name(&"a".repeat(64)));
    }
}
