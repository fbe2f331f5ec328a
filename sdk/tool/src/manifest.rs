//! The plugin's ConfigMap, as the controller's watcher reads it (docs/plugins.md): the
//! component gzip-compressed in `binaryData."plugin.wasm"`, its sha256 (of the uncompressed
//! bytes) in the `plugin-sha256` annotation, its world in the `plugin-world` label, the settings
//! in `data."config.json"`, and, when signed, the `plugin-signature` annotation
//! `<keyID>:<base64 ed25519 signature>` over world, digest and settings.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use base64::Engine as _;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kk_apis::names::{annotation, label};
use sha2::Digest;

use crate::build;

/// The largest base64 text a ConfigMap carries (1 MiB for the whole object).
const CONFIGMAP_MAX_BYTES: usize = 1_000_000;

#[derive(clap::Args)]
pub struct ConfigMapArgs {
    /// The component.
    pub component: PathBuf,
    /// The ConfigMap's name (default: the component's file name).
    #[arg(long)]
    pub name: Option<String>,
    /// The world (default: the one the component implements; given, it must match).
    #[arg(long)]
    pub world: Option<String>,
    /// The controller's namespace.
    #[arg(long, default_value = "karpenter-kakaocloud")]
    pub namespace: String,
    /// The plugin's settings, a JSON file (default `{}`).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Signs with this ed25519 PKCS#8 key (from `kk-plugin keygen`).
    #[arg(long, requires = "key_id")]
    pub sign_key: Option<PathBuf>,
    /// The signing key's id in the controller's trust.json.
    #[arg(long, requires = "sign_key")]
    pub key_id: Option<String>,
    /// What it serves: its world's default, a `shadow` beside what serves (never acting; its
    /// divergences counted; promote it by removing the label
    /// `karpenter.kakaocloud.com/plugin-mode`), or only the NodePools that name it
    /// (`nodepool`).
    #[arg(long, value_enum, default_value = "default")]
    pub mode: Mode,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    Default,
    Shadow,
    Nodepool,
}

fn gzip(bytes: &[u8]) -> Result<Vec<u8>> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    enc.write_all(bytes)?;
    Ok(enc.finish()?)
}

/// The ConfigMap of `args`.
pub fn configmap(args: &ConfigMapArgs) -> Result<ConfigMap> {
    let component = build::read(&args.component)?;
    if !build::is_component(&component) {
        bail!(
            "{} is not a WebAssembly component (build it with kk-plugin build)",
            args.component.display()
        );
    }
    let world = build::world_of(&component)?;
    if let Some(given) = &args.world
        && given != world
    {
        bail!("--world {given}, but the component implements {world}");
    }
    let name = match &args.name {
        Some(n) => n.clone(),
        None => args
            .component
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .context("the component's path has no file name; give --name")?,
    };
    let settings = match &args.config {
        Some(path) => {
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?
        }
        None => "{}".to_owned(),
    };
    serde_json::from_str::<serde_json::Value>(&settings).context("the settings are not JSON")?;
    let settings = settings.trim_end().to_owned();
    let digest = hex::encode(sha2::Sha256::digest(&component));
    let mut annotations = BTreeMap::from([(annotation::PLUGIN_SHA256.to_owned(), digest.clone())]);
    if let (Some(key), Some(id)) = (&args.sign_key, &args.key_id) {
        let pkcs8 = build::read(key)?;
        let pair = ring::signature::Ed25519KeyPair::from_pkcs8(&pkcs8)
            .map_err(|e| anyhow::anyhow!("{} is not an ed25519 PKCS#8 key: {e}", key.display()))?;
        let message = kk_apis::plugin_signing::message(world, &digest, &settings);
        let signature = base64::engine::general_purpose::STANDARD.encode(pair.sign(&message));
        annotations.insert(
            annotation::PLUGIN_SIGNATURE.to_owned(),
            kk_apis::plugin_signing::annotation(id, &signature),
        );
    }
    let compressed = gzip(&component)?;
    let mut labels = BTreeMap::from([(label::PLUGIN_WORLD.to_owned(), world.to_owned())]);
    let mode = match args.mode {
        Mode::Default => None,
        Mode::Shadow => Some(label::PLUGIN_MODE_SHADOW),
        Mode::Nodepool => Some(label::PLUGIN_MODE_NODEPOOL),
    };
    if let Some(mode) = mode {
        labels.insert(label::PLUGIN_MODE.to_owned(), mode.to_owned());
    }
    let encoded = compressed.len().div_ceil(3) * 4;
    if encoded > CONFIGMAP_MAX_BYTES {
        bail!(
            "the gzip-compressed component is {encoded} bytes of base64: over a ConfigMap's 1 MiB"
        );
    }
    Ok(ConfigMap {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: Some(args.namespace.clone()),
            labels: Some(labels),
            annotations: Some(annotations),
            ..Default::default()
        },
        data: Some(BTreeMap::from([(
            kk_plugin_runtime::CONFIG_KEY.to_owned(),
            settings,
        )])),
        binary_data: Some(BTreeMap::from([(
            kk_plugin_runtime::WASM_KEY.to_owned(),
            ByteString(compressed),
        )])),
        ..Default::default()
    })
}

/// `configmap`: the manifest on stdout.
pub fn print(args: &ConfigMapArgs) -> Result<()> {
    let mut cm = serde_json::to_value(configmap(args)?)?;
    if let Some(obj) = cm.as_object_mut() {
        obj.insert("apiVersion".into(), "v1".into());
        obj.insert("kind".into(), "ConfigMap".into());
    }
    print!("{}", serde_yaml::to_string(&cm)?);
    Ok(())
}

/// `apply`: server-side apply to the current kubeconfig's cluster.
pub fn apply(args: &ConfigMapArgs) -> Result<()> {
    use kube::api::{Api, Patch, PatchParams};
    let cm = configmap(args)?;
    let name = cm.metadata.name.clone().unwrap_or_default();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let client = kube::Client::try_default()
            .await
            .context("connecting to the cluster of the current kubeconfig")?;
        let api: Api<ConfigMap> = Api::namespaced(client, &args.namespace);
        let params = PatchParams::apply("kk-plugin").force();
        api.patch(&name, &params, &Patch::Apply(&cm))
            .await
            .with_context(|| format!("applying configmap {}/{name}", args.namespace))?;
        let digest = cm
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(annotation::PLUGIN_SHA256))
            .cloned()
            .unwrap_or_default();
        println!(
            "configmap/{name} applied in {} (sha256:{digest})",
            args.namespace
        );
        anyhow::Ok(())
    })
}

/// Writes a new ed25519 key (PKCS#8, mode 0600) and prints the trust.json entry of its
/// public half.
pub fn keygen(path: &Path, id: &str) -> Result<()> {
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
    println!("{}", serde_json::json!({"id": id, "ed25519": public}));
    Ok(())
}
