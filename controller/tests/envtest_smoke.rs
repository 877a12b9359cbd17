use agentplane_controller::envtest::ApiServer;
use agentplane_crds::Process;
use kube::api::{Api, ListParams};

#[tokio::test]
async fn crds_are_served() {
    let server = ApiServer::shared();
    server.install_crds().await;
    let ns = server.namespace("smoke").await;
    let api: Api<Process> = Api::namespaced(server.client().await, &ns);
    assert!(api.list(&ListParams::default()).await.unwrap().items.is_empty());
}

/// Manual aid: `AGENTPLANE_ENVTEST_HOLD=1 cargo test ... hold -- --ignored --nocapture`
#[test]
#[ignore]
fn hold() {
    let server = ApiServer::start().unwrap();
    println!("KUBECONFIG={}", server.kubeconfig.display());
    std::fs::write("/tmp/envtest.kubeconfig.path", server.kubeconfig.display().to_string()).unwrap();
    std::thread::sleep(std::time::Duration::from_secs(3600));
}
