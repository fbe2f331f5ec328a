//! A real OCI registry for the release tests: the CNCF distribution registry (built from its Go
//! module by `tests/oci/build.sh`) on loopback, serving TLS under a CA made for this run. Processes
//! that must reach it trust that CA through `SSL_CERT_FILE` (a bundle of the system roots and the
//! test CA), so the guide's commands run without any insecure flag.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context as _, anyhow};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

use crate::tools::{free_port, repo_root, wait_for};

/// `$KK_CACHE` as `scripts/env.sh` sets it.
fn kk_cache() -> PathBuf {
    std::env::var_os("KK_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var("HOME").unwrap_or_default())
                .join(".cache/karpenter-kakaocloud")
        })
}

/// The OCI tools `tests/oci/build.sh` builds (`registry`, `imagetool`).
pub fn oci_tool(name: &str) -> PathBuf {
    kk_cache().join("oci").join(name)
}

/// A running registry; stopped when dropped.
pub struct Registry {
    /// `localhost:PORT`: the host part of image and chart references.
    pub host: String,
    /// The system roots plus this registry's CA: give it to processes as `SSL_CERT_FILE`.
    pub ca_bundle: PathBuf,
    child: Child,
    _dir: tempfile::TempDir,
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Registry {
    pub async fn start() -> anyhow::Result<Registry> {
        let binary = oci_tool("registry");
        anyhow::ensure!(
            binary.is_file(),
            "{} is missing: run tests/oci/build.sh",
            binary.display()
        );
        let dir = tempfile::tempdir()?;
        let (ca_pem, cert_pem, key_pem) = pki()?;
        let write = |name: &str, text: &str| -> anyhow::Result<PathBuf> {
            let path = dir.path().join(name);
            std::fs::write(&path, text)?;
            Ok(path)
        };
        let cert = write("tls.crt", &cert_pem)?;
        let key = write("tls.key", &key_pem)?;
        // The roots this process trusts (SSL_CERT_FILE when set), plus the registry's CA.
        let roots = std::env::var_os("SSL_CERT_FILE")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("/etc/ssl/certs/ca-certificates.crt"));
        let system = std::fs::read_to_string(roots).unwrap_or_default();
        let ca_bundle = write("ca-bundle.crt", &format!("{system}\n{ca_pem}"))?;
        let port = free_port();
        let config = write(
            "config.yml",
            &format!(
                "version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\nhttp:\n  addr: 127.0.0.1:{port}\n  tls:\n    certificate: {}\n    key: {}\n",
                dir.path().join("data").display(),
                cert.display(),
                key.display()
            ),
        )?;
        let log = std::fs::File::create(dir.path().join("registry.log"))?;
        let child = Command::new(&binary)
            .args(["serve"])
            .arg(&config)
            .env("OTEL_TRACES_EXPORTER", "none")
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting {}", binary.display()))?;
        let registry = Registry {
            host: format!("localhost:{port}"),
            ca_bundle,
            child,
            _dir: dir,
        };
        let client = {
            kakaocloud::install_crypto_provider();
            reqwest::Client::builder()
                .add_root_certificate(reqwest::Certificate::from_pem(ca_pem.as_bytes())?)
                .build()?
        };
        let url = format!("https://{}/v2/", registry.host);
        wait_for("the OCI registry answers", Duration::from_secs(30), || {
            let (client, url) = (client.clone(), url.clone());
            async move {
                Ok(match client.get(&url).send().await {
                    Ok(r) if r.status().is_success() => Some(()),
                    _ => None,
                })
            }
        })
        .await?;
        Ok(registry)
    }

    /// The registry log, for failure messages.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self._dir.path().join("registry.log")).unwrap_or_default()
    }

    /// Runs `scripts/release.sh VERSION --registry HOST/PATH --prebuilt-plugins` against this
    /// registry: builds the image (up to date when `scripts/test.sh` built it), pins its digest
    /// in the chart and pushes both. Returns the pinned image reference.
    pub fn release(&self, version: &str, path: &str) -> anyhow::Result<String> {
        let _one_at_a_time = release_lock();
        let out = user_shell()
            .arg(repo_root().join("scripts/release.sh"))
            .args([version, "--registry", &format!("{}/{path}", self.host)])
            .arg("--prebuilt-plugins")
            .env("SSL_CERT_FILE", &self.ca_bundle)
            .output()?;
        if !out.status.success() {
            return Err(anyhow!(
                "release.sh failed: {}\n{}",
                String::from_utf8_lossy(&out.stderr),
                self.log()
            ));
        }
        let digest = std::fs::read_to_string(image_digest_file(version))?;
        Ok(format!(
            "{}/{path}/karpenter-provider-kakaocloud:{version}@{}",
            self.host,
            digest.trim()
        ))
    }

    /// Pushes the chart `scripts/release.sh` released as `from` again as version `to` (the same
    /// image, pinned), to have a next version to upgrade to. Returns the packaged chart's path.
    pub fn push_chart_as(&self, from: &str, to: &str, path: &str) -> anyhow::Result<PathBuf> {
        let _one_at_a_time = release_lock();
        let released = kk_cache().join("release").join(from).join("chart");
        let work = tempfile::tempdir()?;
        let chart = work.path().join("karpenter-provider-kakaocloud");
        let status = Command::new("cp")
            .arg("-r")
            .arg(&released)
            .arg(&chart)
            .status()?;
        anyhow::ensure!(status.success(), "copying {}", released.display());
        let meta = std::fs::read_to_string(chart.join("Chart.yaml"))?;
        let meta: String = meta
            .lines()
            .map(|l| {
                if l.starts_with("version:") {
                    format!("version: {to}")
                } else {
                    l.to_owned()
                }
            })
            .collect::<Vec<_>>()
            .join("\n");
        std::fs::write(chart.join("Chart.yaml"), meta + "\n")?;
        let helm = crate::helm_path();
        let out = kk_cache().join("release").join(to);
        std::fs::create_dir_all(&out)?;
        let package = Command::new(&helm)
            .arg("package")
            .arg(&chart)
            .arg("-d")
            .arg(&out)
            .output()?;
        anyhow::ensure!(package.status.success(), "helm package: {package:?}");
        let tgz = out.join(format!("karpenter-provider-kakaocloud-{to}.tgz"));
        let push = Command::new(&helm)
            .arg("push")
            .arg(&tgz)
            .arg(format!("oci://{}/{path}", self.host))
            .env("SSL_CERT_FILE", &self.ca_bundle)
            .env("HELM_CONFIG_HOME", work.path().join("helm"))
            .output()?;
        anyhow::ensure!(push.status.success(), "helm push: {push:?}");
        Ok(tgz)
    }

    /// Copies `file` out of the pushed image `reference` (the image's own bytes, from the
    /// registry) to `out`.
    pub fn extract(&self, reference: &str, file: &str, out: &Path) -> anyhow::Result<()> {
        let status = Command::new(oci_tool("imagetool"))
            .args(["extract", "-ref", reference, "-file", file, "-out"])
            .arg(out)
            .env("SSL_CERT_FILE", &self.ca_bundle)
            .status()?;
        anyhow::ensure!(
            status.success(),
            "imagetool extract {reference} {file} failed"
        );
        Ok(())
    }
}

/// Releases write one image layout and one release directory per version: tests in this process
/// take turns.
fn release_lock() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}

/// `bash` with the environment a user's shell has, not the one `cargo test` gives its tests
/// (`CARGO_*` variables there would make the nested cargo build see changed build-script inputs
/// and rebuild crates the image build had compiled).
fn user_shell() -> Command {
    let mut cmd = Command::new("bash");
    cmd.env_clear();
    for key in [
        "PATH",
        "HOME",
        "LANG",
        "USER",
        "KK_CACHE",
        "CARGO_HOME",
        "RUSTUP_HOME",
        "GOCACHE",
        "GOMODCACHE",
        "GOPROXY",
        "GOFLAGS",
        "CARGO_TARGET_DIR",
        "KK_PLUGIN_DIR",
        "KK_CONTROLPLANE_DIR",
        "SSL_CERT_DIR",
        "RUSTUP_TOOLCHAIN",
    ] {
        if let Some(value) = std::env::var_os(key) {
            cmd.env(key, value);
        }
    }
    cmd
}

/// Where `scripts/build-image.sh` records the digest of VERSION's image.
pub fn image_digest_file(version: &str) -> PathBuf {
    kk_cache().join("image").join(version).join("digest")
}

/// A CA and a serving certificate for localhost / 127.0.0.1.
fn pki() -> anyhow::Result<(String, String, String)> {
    let ca_key = KeyPair::generate()?;
    let mut ca = CertificateParams::new(Vec::<String>::new())?;
    ca.distinguished_name
        .push(DnType::CommonName, "kk-test-registry-ca");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca_pem = ca.self_signed(&ca_key)?.pem();
    let issuer = Issuer::new(ca, ca_key);
    let key = KeyPair::generate()?;
    let mut leaf = CertificateParams::new(vec!["localhost".into(), "127.0.0.1".into()])?;
    leaf.distinguished_name
        .push(DnType::CommonName, "localhost");
    leaf.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    leaf.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let cert = leaf.signed_by(&key, &issuer)?;
    Ok((ca_pem, cert.pem(), key.serialize_pem()))
}
