//! The Kubernetes manifests in `contrib/kubernetes/` (issue 42): every
//! object is read into the Kubernetes API type of its kind (k8s-openapi)
//! and written back, and nothing may be lost on the way, so a misspelt
//! key (which the types would silently drop) or a value of the wrong type
//! fails; the ferry config each carries validates; the probes ask the
//! admin port for `/healthz` and `/readyz`; and every ConfigMap, Secret
//! and claim a Deployment names is in the same file.

use std::path::{Path, PathBuf};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolumeClaim, Secret, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use ferry_tests::daemon::Workspace;
use ferry_tests::repo_root;

fn manifests() -> Vec<PathBuf> {
    let dir = repo_root().join("contrib/kubernetes");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("contrib/kubernetes")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    assert!(files.len() >= 2, "the direct_hold and shared_outbox layouts: {files:?}");
    files
}

fn documents(file: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(file).expect("read a manifest");
    serde_saphyr::from_multiple::<Value>(&text).unwrap_or_else(|e| panic!("{}: not YAML: {e}", file.display()))
}

/// Where `written` has something `read` has not (a key the type does not
/// know, or a value it reads as something else), as a path.
fn lost(written: &Value, read: &Value, path: &str) -> Option<String> {
    match (written, read) {
        (Value::Object(w), Value::Object(r)) => w.iter().find_map(|(k, v)| match r.get(k) {
            Some(rv) => lost(v, rv, &format!("{path}.{k}")),
            None => Some(format!("{path}.{k}")),
        }),
        (Value::Array(w), Value::Array(r)) if w.len() == r.len() => {
            w.iter().zip(r).enumerate().find_map(|(i, (w, r))| lost(w, r, &format!("{path}[{i}]")))
        }
        _ if written == read => None,
        _ => Some(format!("{path} (written {written}, read {read})")),
    }
}

/// `doc` through the API type `T` and back.
fn through<T: DeserializeOwned + Serialize>(doc: &Value, what: &str) -> Value {
    let typed: T = serde_json::from_value(doc.clone()).unwrap_or_else(|e| panic!("{what}: {e}"));
    serde_json::to_value(typed).expect("serialise")
}

fn name(doc: &Value) -> &str {
    doc["metadata"]["name"].as_str().unwrap_or("?")
}

#[test]
fn every_object_is_the_kubernetes_type_of_its_kind_with_nothing_left_over() {
    for file in manifests() {
        for doc in documents(&file) {
            let kind = doc["kind"].as_str().unwrap_or_default().to_owned();
            let what = format!("{} {kind} {}", file.display(), name(&doc));
            let read = match kind.as_str() {
                "ConfigMap" => through::<ConfigMap>(&doc, &what),
                "Secret" => through::<Secret>(&doc, &what),
                "PersistentVolumeClaim" => through::<PersistentVolumeClaim>(&doc, &what),
                "Deployment" => through::<Deployment>(&doc, &what),
                "Service" => through::<Service>(&doc, &what),
                "PodDisruptionBudget" => through::<PodDisruptionBudget>(&doc, &what),
                other => panic!("{what}: a kind this test does not check: {other:?}"),
            };
            if let Some(path) = lost(&doc, &read, "") {
                panic!("{what}: {path} is not part of the {kind} type (a typo?)");
            }
        }
    }
}

#[test]
fn a_misspelt_key_is_caught() {
    let doc: Value = serde_saphyr::from_str(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec:\n  replicas: 1\n  selector: {matchLabels: {a: b}}\n  \
         template:\n    metadata: {labels: {a: b}}\n    spec:\n      containers:\n        - name: ferry\n          image: i\n          readinessProbe: {httpGet: {pth: /readyz, port: 1}}\n",
    )
    .expect("YAML");
    let read = through::<Deployment>(&doc, "the misspelt one");
    let path = lost(&doc, &read, "").expect("the misspelt key is found");
    assert!(path.ends_with("readinessProbe.httpGet.pth"), "{path}");
}

#[test]
fn each_config_validates_and_each_deployment_is_probed_and_complete() {
    for file in manifests() {
        let docs = documents(&file);
        let named = |kind: &str, n: &str| docs.iter().any(|d| d["kind"] == kind && name(d) == n);
        for config in docs.iter().filter(|d| d["kind"] == "ConfigMap") {
            let text = config["data"]["ferry.toml"].as_str().expect("a ConfigMap with ferry.toml");
            let ws = Workspace::with_plugins(&["filter"]).with_env(&[
                ("FERRY_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/%2f"),
                ("FERRY_MQTT_URL", "mqtt://127.0.0.1:1883"),
                ("FERRY_STORE_URL", "postgres://ferry@127.0.0.1:5432/ferry"),
            ]);
            // The plugin volume's mount point, as the workspace's plugins.
            let text = text.replace("dir = \"/plugins\"", "dir = \"plugins\"");
            ws.config(&text);
            let out = ws.ferry(&["validate", "-c", "ferry.toml"]);
            assert!(
                out.status.success(),
                "{} ConfigMap {}: ferry validate: {}{}",
                file.display(),
                name(config),
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        for d in docs.iter().filter(|d| d["kind"] == "Deployment") {
            let what = format!("{} Deployment {}", file.display(), name(d));
            let pod = &d["spec"]["template"]["spec"];
            let container = &pod["containers"][0];
            let ports: Vec<&str> =
                container["ports"].as_array().into_iter().flatten().filter_map(|p| p["name"].as_str()).collect();
            for (probe, path) in [("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")] {
                let get = &container[probe]["httpGet"];
                assert_eq!(get["path"], path, "{what}: {probe}");
                let port = get["port"].as_str().unwrap_or_default();
                assert!(ports.contains(&port), "{what}: {probe} asks port {port:?}, not one of {ports:?}");
            }
            for volume in pod["volumes"].as_array().into_iter().flatten() {
                if let Some(map) = volume["configMap"]["name"].as_str() {
                    assert!(named("ConfigMap", map), "{what}: ConfigMap {map} is not in the file");
                }
                if let Some(claim) = volume["persistentVolumeClaim"]["claimName"].as_str() {
                    assert!(named("PersistentVolumeClaim", claim), "{what}: claim {claim} is not in the file");
                }
            }
            for env in container["env"].as_array().into_iter().flatten() {
                if let Some(secret) = env["valueFrom"]["secretKeyRef"]["name"].as_str() {
                    let key = env["valueFrom"]["secretKeyRef"]["key"].as_str().unwrap_or_default();
                    let has = docs
                        .iter()
                        .any(|s| s["kind"] == "Secret" && name(s) == secret && !s["stringData"][key].is_null());
                    assert!(has, "{what}: {} reads {secret}/{key}, which is not in the file", env["name"]);
                }
            }
            let selector = &d["spec"]["selector"]["matchLabels"];
            let labels = &d["spec"]["template"]["metadata"]["labels"];
            for (k, v) in selector.as_object().into_iter().flatten() {
                assert_eq!(&labels[k], v, "{what}: the selector's {k} is not on the pods");
            }
        }
    }
}
