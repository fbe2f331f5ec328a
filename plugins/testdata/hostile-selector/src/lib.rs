//! A test fixture, not a policy: an instance-selector that misbehaves the way its config says,
//! so the host's bounds can be tested against a real component.
//!
//! `config.json`: `{"mode": M}` with M one of
//! `identity` (returns 0..n), `reverse` (n-1..0), `trap` (panics, i.e. traps),
//! `loop` (never returns), `alloc` (allocates until memory runs out),
//! `out-of-range` (returns index n), `duplicate` (returns 0 twice),
//! `oversized` (returns a million indices), `log-flood` (logs 10 000 long lines, then identity),
//! `recurse` (recurses without bound), `trap-on-one` (identity, but traps on a single candidate and refuses every later call of the
//! same instance).

use karpenter_kakaocloud_sdk::prelude::*;
use serde::Deserialize;

static POISONED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Config {
    pub mode: String,
}

pub struct Hostile;

impl InstanceSelector for Hostile {
    type Config = Config;

    fn rank(input: &RankRequest, config: &Config) -> Result<Vec<u32>, String> {
        let n = input.candidates.len() as u32;
        match config.mode.as_str() {
            "" | "identity" => Ok((0..n).collect()),
            "reverse" => Ok((0..n).rev().collect()),
            "trap" => panic!("hostile plugin traps on purpose"),
            // Passes the self-test (three candidates), traps on a single candidate after marking
            // its own memory, so a trapped instance that were reused would refuse.
            "trap-on-one" => {
                if n == 1 {
                    POISONED.store(true, std::sync::atomic::Ordering::Relaxed);
                    panic!("hostile plugin traps on a single candidate");
                }
                if POISONED.load(std::sync::atomic::Ordering::Relaxed) {
                    return Err("poisoned: this instance trapped before".into());
                }
                Ok((0..n).collect())
            }
            "loop" => {
                let mut x: u64 = 0;
                loop {
                    x = std::hint::black_box(x.wrapping_add(1));
                }
            }
            "alloc" => {
                let mut hoard: Vec<Vec<u8>> = Vec::new();
                loop {
                    hoard.push(vec![1u8; 1 << 20]);
                    std::hint::black_box(&hoard);
                }
            }
            "recurse" => Ok((0..depth(u64::from(n))).map(|_| 0).collect()),
            "out-of-range" => Ok(vec![n]),
            "duplicate" => Ok(vec![0, 0]),
            "oversized" => Ok(vec![0; 1_000_000]),
            "log-flood" => {
                let line = "x".repeat(10_000);
                for _ in 0..10_000 {
                    log(Level::Info, &line);
                }
                Ok((0..n).collect())
            }
            other => Err(format!("unknown mode {other:?}")),
        }
    }
}

/// Recursion the optimiser cannot turn into a loop: each frame's result is used after the call.
#[allow(unconditional_recursion)]
fn depth(n: u64) -> u32 {
    let next = std::hint::black_box(n.wrapping_add(1));
    depth(next).wrapping_add(std::hint::black_box(1))
}

karpenter_kakaocloud_sdk::export_instance_selector!(Hostile, wit = "../../../wit");
