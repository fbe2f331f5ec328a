//! The install guide's steps, as a user runs them.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::bail;

use crate::*;

impl Cluster {
    /// Step 1: the namespace and both Secrets, with the guide's commands (the simulator's
    /// application credential as the IAM access key).
    pub fn step1_secrets(&self) -> anyhow::Result<()> {
        let creds = self.sim.describe();
        let id = creds["applicationCredentialId"]
            .as_str()
            .unwrap_or_default();
        let secret = creds["applicationCredentialSecret"]
            .as_str()
            .unwrap_or_default();
        self.shell(&format!(
            r#"
kubectl create namespace karpenter-kakaocloud --dry-run=client -o yaml \
  | kubectl apply -f -

export APP_CRED_ID='{id}'
export APP_CRED_SECRET='{secret}'

kubectl -n karpenter-kakaocloud create secret generic kakaocloud-credentials \
  --from-literal=applicationCredentialId="$APP_CRED_ID" \
  --from-literal=applicationCredentialSecret="$APP_CRED_SECRET" \
  --from-literal=region=kr-central-2

unset APP_CRED_ID APP_CRED_SECRET

KEY=$(head -c 32 /dev/urandom | base64)
printf '{{"activeKeyID":"k1","keys":[{{"id":"k1","key":"%s"}}]}}\n' "$KEY" > keyring.json

kubectl -n karpenter-kakaocloud create secret generic karpenter-sigkey \
  --from-file=keyring.json=./keyring.json

unset KEY
rm keyring.json
"#
        ))?;
        let keys = self.shell(
            r#"kubectl -n karpenter-kakaocloud get secret kakaocloud-credentials \
  -o go-template='{{range $key, $value := .data}}{{$key}}{{"\n"}}{{end}}'"#,
        )?;
        let keys: Vec<&str> = keys.lines().collect();
        if keys
            != [
                "applicationCredentialId",
                "applicationCredentialSecret",
                "region",
            ]
        {
            bail!("the credentials Secret has keys {keys:?}");
        }
        Ok(())
    }

    /// Step 2: the guide's `helm upgrade --install ... --wait`, from the chart directory instead
    /// of the OCI registry, with the simulator's endpoints and `extra` `--set` flags. Returns how
    /// long helm took.
    pub fn step2_install(&self, extra: &[&str]) -> anyhow::Result<Duration> {
        let chart = chart_dir().display().to_string();
        self.step2(&chart, None, extra, &[])
    }

    /// Step 2 exactly as the guide types it, from an OCI registry: `oci://<registry>/…` at
    /// `$KARPENTER_CHART_VERSION`, with `SSL_CERT_FILE` trusting the registry. Only the registry
    /// host and the simulator's endpoints differ from the guide.
    pub fn step2_install_oci(
        &self,
        chart: &str,
        version: &str,
        ca_bundle: &Path,
        extra: &[&str],
    ) -> anyhow::Result<Duration> {
        self.step2(chart, Some(version), extra, &[("SSL_CERT_FILE", ca_bundle)])
    }

    fn step2(
        &self,
        chart: &str,
        version: Option<&str>,
        extra: &[&str],
        env: &[(&str, &Path)],
    ) -> anyhow::Result<Duration> {
        let mut sets = String::new();
        for (service, url) in self.sim.endpoint_overrides() {
            sets.push_str(&format!("  --set endpoints.{service}={url} \\\n"));
        }
        for e in extra {
            sets.push_str(&format!("  --set {e} \\\n"));
        }
        let (export, version_flag) = match version {
            Some(v) => (
                format!("export KARPENTER_CHART_VERSION='{v}'\n"),
                "  --version \"$KARPENTER_CHART_VERSION\" \\\n",
            ),
            None => (String::new(), ""),
        };
        let started = Instant::now();
        self.shell_with(
            &format!(
                r#"{export}
helm upgrade --install karpenter-provider-kakaocloud \
  {chart} \
{version_flag}  --namespace karpenter-kakaocloud \
  --create-namespace \
  --set clusterName='{CLUSTER}' \
  --set projectID='{PROJECT}' \
  --set credentials.secretName=kakaocloud-credentials \
  --set sigKey.secretName=karpenter-sigkey \
{sets}  --wait \
  --timeout 10m
"#
            ),
            env,
        )?;
        Ok(started.elapsed())
    }

    /// `kubectl get deployment` of Step 2: the READY column.
    pub fn deployment_ready(&self) -> anyhow::Result<String> {
        let out = self.kubectl(
            &[
                "-n",
                NAMESPACE,
                "get",
                "deployment",
                RELEASE,
                "-o",
                "jsonpath={.status.readyReplicas}/{.spec.replicas}",
            ],
            None,
        )?;
        Ok(out)
    }
}

impl Cluster {
    /// Step 3: the guide's KCNodeClass; waits until its six conditions are True.
    pub async fn step3_nodeclass(
        &self,
        timeout: Duration,
    ) -> anyhow::Result<Vec<(String, String)>> {
        self.kubectl(&["apply", "-f", "-"], Some(&guide_nodeclass()))?;
        let deadline = Instant::now() + timeout;
        loop {
            let out = self.kubectl(
                &[
                    "get",
                    "kcnodeclass",
                    "karpenter-default",
                    "-o",
                    r#"jsonpath={range .status.conditions[*]}{.type}{"\t"}{.status}{"\n"}{end}"#,
                ],
                None,
            )?;
            let conditions: Vec<(String, String)> = out
                .lines()
                .filter_map(|l| l.split_once('\t'))
                .map(|(a, b)| (a.to_owned(), b.to_owned()))
                .collect();
            if conditions.len() >= 6 && conditions.iter().all(|(_, s)| s == "True") {
                return Ok(conditions);
            }
            if Instant::now() > deadline {
                bail!("KCNodeClass not Ready in {timeout:?}: {conditions:?}");
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// Step 4: the guide's NodePool (this cluster's CNI is not Cilium: no startup taint).
    pub fn step4_nodepool(&self) -> anyhow::Result<()> {
        self.kubectl(
            &[
                "apply",
                "-f",
                &guide_path("nodepool.yaml").display().to_string(),
            ],
            None,
        )?;
        Ok(())
    }

    /// Step 5: the guide's demo Deployment, in `default`.
    pub fn step5_demo(&self) -> anyhow::Result<()> {
        self.kubectl(
            &[
                "apply",
                "-f",
                &guide_path("karpenter-demo.yaml").display().to_string(),
            ],
            None,
        )?;
        Ok(())
    }

    pub fn delete_demo(&self) -> anyhow::Result<()> {
        self.kubectl(
            &[
                "delete",
                "-f",
                &guide_path("karpenter-demo.yaml").display().to_string(),
            ],
            None,
        )?;
        Ok(())
    }
}
