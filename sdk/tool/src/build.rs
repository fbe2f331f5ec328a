//! From a plugin crate to a component: cargo builds the crate for `wasm32-unknown-unknown`, then
//! the core module is wrapped as a component of the world its bindings declare.
//!
//! Two toolchains can build the core module. A rustup toolchain with the
//! `wasm32-unknown-unknown` target is used when present. Otherwise this repository's recipe:
//! Debian's rustc (1.96+) with its std source, built with `-Zbuild-std` and linked by LLVM's
//! wasm-ld (what `scripts/setup.sh` installs where rustup cannot fetch a wasm32 target). Both
//! build with the same release profile: LTO, one codegen unit, `panic = "abort"`, no debug info.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};
use sha2::Digest;

const TARGET: &str = "wasm32-unknown-unknown";

/// The worlds and the function each exports.
const WORLDS: [(&str, &str); 3] = [
    ("instance-selector", "rank"),
    ("consolidation-scorer", "score"),
    ("userdata-renderer", "render"),
];

#[derive(clap::Args)]
pub struct Build {
    /// The plugin crate's manifest.
    #[arg(long, default_value = "Cargo.toml")]
    pub manifest_path: PathBuf,
    /// Packages to build, when the manifest is a workspace's (default: the manifest's package).
    #[arg(short, long = "package")]
    pub packages: Vec<String>,
    /// Where cargo builds (default: the crate's own target directory).
    #[arg(long)]
    pub target_dir: Option<PathBuf>,
    /// Where the components are written, as `<package>.wasm` (default: `<target-dir>/plugin`).
    #[arg(long)]
    pub out_dir: Option<PathBuf>,
    /// Build against the workspace's Cargo.lock as it is.
    #[arg(long)]
    pub locked: bool,
    /// Which toolchain: `auto` (rustup's target if installed, else the recipe), `rustup` or
    /// `recipe`.
    #[arg(long, default_value = "auto")]
    pub toolchain: Toolchain,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Toolchain {
    Auto,
    Rustup,
    Recipe,
}

/// Debian's guest toolchain, as `scripts/setup.sh` installs it.
const RECIPE_RUSTC: &str = "/usr/bin/rustc";
const RECIPE_CARGO: &str = "/usr/bin/cargo";
const RECIPE_LLVM_BIN: &str = "/usr/lib/llvm-19/bin";
const RECIPE_STD_SOURCE: &str = "/usr/lib/rustlib/src/rust/library";

fn rustup_has_target() -> bool {
    Command::new("rustup")
        .args(["target", "list", "--installed"])
        .output()
        .is_ok_and(|o| {
            o.status.success()
                && String::from_utf8_lossy(&o.stdout)
                    .lines()
                    .any(|l| l.trim() == TARGET)
        })
}

fn recipe_present() -> bool {
    let new_enough = Command::new(RECIPE_RUSTC)
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| {
            let v = String::from_utf8_lossy(&o.stdout).into_owned();
            let minor = v
                .split_whitespace()
                .nth(1)?
                .split('.')
                .nth(1)?
                .parse::<u32>()
                .ok()?;
            Some(minor >= 96)
        })
        .unwrap_or(false);
    new_enough
        && Path::new(RECIPE_LLVM_BIN).join("wasm-ld").exists()
        && Path::new(RECIPE_STD_SOURCE).is_dir()
}

/// The packages of `manifest` and the target directory cargo uses for it.
struct Metadata {
    packages: Vec<String>,
    target_dir: PathBuf,
}

fn metadata(manifest: &Path) -> Result<Metadata> {
    #[derive(serde::Deserialize)]
    struct Package {
        name: String,
        manifest_path: PathBuf,
    }
    #[derive(serde::Deserialize)]
    struct Raw {
        packages: Vec<Package>,
        target_directory: PathBuf,
    }
    let out = Command::new("cargo")
        .args([
            "metadata",
            "--no-deps",
            "--format-version",
            "1",
            "--manifest-path",
        ])
        .arg(manifest)
        .output()
        .context("running cargo metadata")?;
    if !out.status.success() {
        bail!(
            "cargo metadata failed for {}: {}",
            manifest.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let raw: Raw = serde_json::from_slice(&out.stdout).context("reading cargo metadata")?;
    let manifest = manifest
        .canonicalize()
        .unwrap_or_else(|_| manifest.to_owned());
    // A package's own manifest names that package; a workspace's names all its members.
    let own: Vec<String> = raw
        .packages
        .iter()
        .filter(|p| p.manifest_path == manifest)
        .map(|p| p.name.clone())
        .collect();
    Ok(Metadata {
        packages: if own.is_empty() {
            raw.packages.into_iter().map(|p| p.name).collect()
        } else {
            own
        },
        target_dir: raw.target_directory,
    })
}

pub fn build(args: &Build) -> Result<()> {
    let meta = metadata(&args.manifest_path)?;
    let packages = if args.packages.is_empty() {
        if meta.packages.len() != 1 {
            bail!(
                "{} is a workspace of {} packages; name them with -p",
                args.manifest_path.display(),
                meta.packages.len()
            );
        }
        meta.packages.clone()
    } else {
        args.packages.clone()
    };
    let target_dir = args.target_dir.clone().unwrap_or(meta.target_dir);
    let use_rustup = match args.toolchain {
        Toolchain::Rustup => true,
        Toolchain::Recipe => false,
        Toolchain::Auto if rustup_has_target() => true,
        Toolchain::Auto if recipe_present() => false,
        Toolchain::Auto => bail!(
            "no wasm32 toolchain: add rustup's target (rustup target add {TARGET}) or install this repository's recipe (scripts/setup.sh)"
        ),
    };
    let mut cargo = if use_rustup {
        let mut c = Command::new("cargo");
        c.args(["build", "--release", "--target", TARGET]);
        c
    } else {
        let mut c = Command::new(RECIPE_CARGO);
        let path = std::env::var("PATH").unwrap_or_default();
        c.env("PATH", format!("{RECIPE_LLVM_BIN}:/usr/bin:{path}"))
            .env("RUSTC", RECIPE_RUSTC)
            // Debian's std source builds only with the unstable build-std.
            .env("RUSTC_BOOTSTRAP", "1")
            .env("CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_LINKER", "wasm-ld")
            .args(["build", "--release", "--target", TARGET])
            .arg("-Zbuild-std=std,panic_abort");
        c
    };
    cargo
        // The host's flags (sanitizers, remaps, target-cpu) are not the guest's.
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env("CARGO_TARGET_DIR", &target_dir)
        .env("CARGO_PROFILE_RELEASE_OPT_LEVEL", "3")
        .env("CARGO_PROFILE_RELEASE_LTO", "true")
        .env("CARGO_PROFILE_RELEASE_CODEGEN_UNITS", "1")
        .env("CARGO_PROFILE_RELEASE_DEBUG", "false")
        .env("CARGO_PROFILE_RELEASE_PANIC", "abort")
        .arg("--manifest-path")
        .arg(&args.manifest_path);
    if args.locked {
        cargo.arg("--locked");
    }
    for p in &packages {
        cargo.args(["-p", p]);
    }
    eprintln!(
        "kk-plugin: building {} for {TARGET} with {}",
        packages.join(", "),
        if use_rustup {
            "rustup's target"
        } else {
            "the Debian recipe"
        }
    );
    let status = cargo.status().context("running cargo")?;
    if !status.success() {
        bail!("cargo build failed ({status})");
    }
    let out_dir = args
        .out_dir
        .clone()
        .unwrap_or_else(|| target_dir.join("plugin"));
    std::fs::create_dir_all(&out_dir).with_context(|| format!("creating {}", out_dir.display()))?;
    for p in &packages {
        let core = target_dir
            .join(TARGET)
            .join("release")
            .join(format!("{}.wasm", p.replace('-', "_")));
        if !core.exists() {
            bail!(
                "{} was not produced (is crate-type cdylib?)",
                core.display()
            );
        }
        let out = out_dir.join(format!("{p}.wasm"));
        let world = componentize(&core, &out)?;
        let bytes = read(&out)?;
        println!(
            "{} {world} {} bytes sha256:{}",
            out.display(),
            bytes.len(),
            hex::encode(sha2::Sha256::digest(&bytes))
        );
    }
    Ok(())
}

pub fn read(path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).with_context(|| format!("reading {}", path.display()))
}

/// A component's preamble: magic, then version 0x0d with layer 1.
pub fn is_component(bytes: &[u8]) -> bool {
    bytes.len() >= 8 && bytes[..4] == *b"\0asm" && bytes[4..8] == [0x0d, 0x00, 0x01, 0x00]
}

/// The plugin world a core module (by its component-type sections) or a component (by its
/// exports) implements.
pub fn world_of(wasm: &[u8]) -> Result<&'static str> {
    let exports: Vec<String> = if is_component(wasm) {
        match wit_component::decode(wasm).context("decoding the component")? {
            wit_component::DecodedWasm::Component(resolve, world) => resolve.worlds[world]
                .exports
                .keys()
                .map(|k| resolve.name_world_key(k))
                .collect(),
            wit_component::DecodedWasm::WitPackage(..) => bail!("a WIT package, not a plugin"),
        }
    } else {
        let (_, bindgen) = wit_component::metadata::decode(wasm)
            .context("reading the module's component-type sections")?;
        bindgen.resolve.worlds[bindgen.world]
            .exports
            .keys()
            .map(|k| bindgen.resolve.name_world_key(k))
            .collect()
    };
    let found: Vec<&'static str> = WORLDS
        .iter()
        .filter(|(_, f)| exports.iter().any(|e| e == f))
        .map(|(w, _)| *w)
        .collect();
    match found.as_slice() {
        [one] => Ok(one),
        [] => bail!("it exports none of rank, score, render (exports: {exports:?})"),
        _ => bail!("it exports more than one plugin function: {exports:?}"),
    }
}

/// Wraps the core module `input` as a component at `output` (rewritten only when its bytes
/// change, so builds downstream see no change) and returns its world.
pub fn componentize(input: &Path, output: &Path) -> Result<&'static str> {
    let core = read(input)?;
    let world = world_of(&core)?;
    let component = wit_component::ComponentEncoder::default()
        .module(&core)
        .context("loading the core module")?
        .validate(true)
        .encode()
        .context("encoding the component")?;
    if std::fs::read(output).ok().as_deref() != Some(component.as_slice()) {
        let tmp = output.with_extension("wasm.tmp");
        std::fs::write(&tmp, &component).with_context(|| format!("writing {}", tmp.display()))?;
        std::fs::rename(&tmp, output)?;
    }
    Ok(world)
}
