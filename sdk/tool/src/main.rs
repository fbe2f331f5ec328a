//! `kk-plugin`: the plugin build tool.
//!
//! ```text
//! kk-plugin componentize <core.wasm> <out.wasm>      core module -> component (prints its world)
//! kk-plugin world <core-or-component.wasm>            prints the world a core module was bound to
//! kk-plugin configmap <component.wasm> --name N [--world W] [--namespace NS] [--config FILE]
//!                    [--sign-key KEY.pk8 --key-id ID] prints the plugin's ConfigMap YAML
//! kk-plugin keygen <KEY.pk8> <ID>                     writes an ed25519 signing key and prints
//!                                                     its trust.json entry
//! ```
//!
//! The ConfigMap format (see docs/plugins.md): `binaryData."plugin.wasm"` holds the component,
//! gzip-compressed; the annotation `karpenter.kakaocloud.com/plugin-sha256` is the lowercase hex
//! sha256 of the *uncompressed* component; the label `karpenter.kakaocloud.com/plugin-world`
//! names the world; `data."config.json"` holds the plugin's settings. Signed, the annotation
//! `karpenter.kakaocloud.com/plugin-signature` is `<keyID>:<base64 ed25519 signature>` over the
//! world, the component digest and the settings (`kk_apis::plugin_signing`).

use std::io::Write;
use std::path::Path;

use anyhow::{Context, Result, bail};
use base64::Engine as _;
use sha2::Digest;

/// The worlds and the one function each exports.
const WORLDS: [(&str, &str); 3] = [
    ("instance-selector", "rank"),
    ("consolidation-scorer", "score"),
    ("userdata-renderer", "render"),
];

fn world_of_core(core: &[u8]) -> Result<&'static str> {
    let (_, bindgen) = wit_component::metadata::decode(core)
        .context("reading the module's component-type sections")?;
    let world = &bindgen.resolve.worlds[bindgen.world];
    let exports: Vec<String> = world
        .exports
        .keys()
        .map(|k| bindgen.resolve.name_world_key(k))
        .collect();
    let found: Vec<&'static str> = WORLDS
        .iter()
        .filter(|(_, f)| exports.iter().any(|e| e == f))
        .map(|(w, _)| *w)
        .collect();
    match found.as_slice() {
        [one] => Ok(one),
        [] => bail!("the module exports none of rank, score, render (exports: {exports:?})"),
        _ => bail!("the module exports more than one plugin function: {exports:?}"),
    }
}

fn componentize(input: &Path, output: &Path) -> Result<()> {
    let core = std::fs::read(input).with_context(|| format!("reading {}", input.display()))?;
    let world = world_of_core(&core)?;
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
    println!("{world}");
    Ok(())
}

fn gzip(bytes: &[u8]) -> Result<Vec<u8>> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    enc.write_all(bytes)?;
    Ok(enc.finish()?)
}

/// A YAML double-quoted scalar.
fn q(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn configmap(args: &[String]) -> Result<()> {
    let mut file = None;
    let (mut name, mut world, mut namespace, mut config) =
        (None, None, "karpenter-kakaocloud".to_owned(), None);
    let (mut sign_key, mut key_id) = (None::<String>, None::<String>);
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut val = || {
            it.next()
                .cloned()
                .with_context(|| format!("{a} needs a value"))
        };
        match a.as_str() {
            "--name" => name = Some(val()?),
            "--world" => world = Some(val()?),
            "--namespace" => namespace = val()?,
            "--config" => config = Some(val()?),
            "--sign-key" => sign_key = Some(val()?),
            "--key-id" => key_id = Some(val()?),
            s if !s.starts_with("--") && file.is_none() => file = Some(s.to_owned()),
            s => bail!("unexpected argument {s}"),
        }
    }
    let file = file.context("configmap needs the component file")?;
    let component = std::fs::read(&file).with_context(|| format!("reading {file}"))?;
    if !wasmparser_is_component(&component) {
        bail!("{file} is not a WebAssembly component (run componentize first)");
    }
    let name = name.unwrap_or_else(|| {
        Path::new(&file)
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default()
    });
    let world = world.context(
        "--world is needed (instance-selector, consolidation-scorer or userdata-renderer)",
    )?;
    if !WORLDS.iter().any(|(w, _)| *w == world) {
        bail!("unknown world {world}");
    }
    let config_json = match config {
        Some(path) => std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?,
        None => "{}".to_owned(),
    };
    let digest = hex::encode(sha2::Sha256::digest(&component));
    let config_json = config_json.trim_end().to_owned();
    let signature = match (sign_key, key_id) {
        (Some(path), Some(id)) => {
            let pkcs8 = std::fs::read(&path).with_context(|| format!("reading {path}"))?;
            let pair = ring::signature::Ed25519KeyPair::from_pkcs8(&pkcs8)
                .map_err(|e| anyhow::anyhow!("{path} is not an ed25519 PKCS#8 key: {e}"))?;
            let message = kk_apis::plugin_signing::message(&world, &digest, &config_json);
            let sig = base64::engine::general_purpose::STANDARD.encode(pair.sign(&message));
            Some(kk_apis::plugin_signing::annotation(&id, &sig))
        }
        (None, None) => None,
        _ => bail!("--sign-key and --key-id go together"),
    };
    let gz = base64::engine::general_purpose::STANDARD.encode(gzip(&component)?);
    let mut out = String::new();
    out.push_str("apiVersion: v1\nkind: ConfigMap\nmetadata:\n");
    out.push_str(&format!(
        "  name: {}\n  namespace: {}\n",
        q(&name),
        q(&namespace)
    ));
    out.push_str(&format!(
        "  labels:\n    karpenter.kakaocloud.com/plugin-world: {}\n",
        q(&world)
    ));
    out.push_str(&format!(
        "  annotations:\n    {}: {}\n",
        kk_apis::names::annotation::PLUGIN_SHA256,
        q(&digest)
    ));
    if let Some(sig) = signature {
        out.push_str(&format!(
            "    {}: {}\n",
            kk_apis::names::annotation::PLUGIN_SIGNATURE,
            q(&sig)
        ));
    }
    out.push_str(&format!("data:\n  config.json: {}\n", q(&config_json)));
    out.push_str("binaryData:\n  plugin.wasm: ");
    out.push_str(&gz);
    out.push('\n');
    if gz.len() > 1_000_000 {
        bail!(
            "the gzip-compressed component is {} bytes of base64: over a ConfigMap's 1 MiB",
            gz.len()
        );
    }
    std::io::stdout().write_all(out.as_bytes())?;
    Ok(())
}

/// Writes a new ed25519 key (PKCS#8, mode 0600) and prints the trust.json entry of its
/// public half.
fn keygen(path: &Path, id: &str) -> Result<()> {
    use ring::signature::KeyPair;
    if id.is_empty() || id.contains(':') {
        bail!("the key id must be non-empty and without ':'");
    }
    if path.exists() {
        bail!("{} exists; not overwriting a key", path.display());
    }
    let rng = ring::rand::SystemRandom::new();
    let pkcs8 = ring::signature::Ed25519KeyPair::generate_pkcs8(&rng)
        .map_err(|_| anyhow::anyhow!("generating the key failed"))?;
    let pair = ring::signature::Ed25519KeyPair::from_pkcs8(pkcs8.as_ref())
        .map_err(|_| anyhow::anyhow!("reading the generated key failed"))?;
    let mut file = std::fs::OpenOptions::new();
    file.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut file, 0o600);
    file.open(path)
        .and_then(|mut f| f.write_all(pkcs8.as_ref()))
        .with_context(|| format!("writing {}", path.display()))?;
    let public = base64::engine::general_purpose::STANDARD.encode(pair.public_key().as_ref());
    println!("{{\"id\":{},\"ed25519\":{}}}", q(id), q(&public));
    Ok(())
}

/// A component's preamble: magic, then version 0x0d with layer 1.
fn wasmparser_is_component(bytes: &[u8]) -> bool {
    bytes.len() >= 8 && bytes[..4] == *b"\0asm" && bytes[4..8] == [0x0d, 0x00, 0x01, 0x00]
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("componentize") if args.len() == 3 => {
            componentize(Path::new(&args[1]), Path::new(&args[2]))
        }
        Some("world") if args.len() == 2 => {
            let core = std::fs::read(&args[1]).with_context(|| format!("reading {}", args[1]))?;
            println!("{}", world_of_core(&core)?);
            Ok(())
        }
        Some("configmap") => configmap(&args[1..]),
        Some("keygen") if args.len() == 3 => keygen(Path::new(&args[1]), &args[2]),
        _ => bail!(
            "usage: kk-plugin componentize <core.wasm> <out.wasm> | world <core.wasm> | configmap <component.wasm> --world W [--name N] [--namespace NS] [--config FILE] [--sign-key KEY.pk8 --key-id ID] | keygen <KEY.pk8> <ID>"
        ),
    }
}
