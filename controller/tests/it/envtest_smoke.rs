use agentplane_crds::Process;
use agentplane_envtest::ApiServer;
use kube::api::{Api, ListParams};

#[tokio::test]
async fn crds_are_served() {
    let server = ApiServer::shared();
    server.install_crds().await;
    let ns = server.namespace("smoke").await;
    let api: Api<Process> = Api::namespaced(server.client().await, &ns);
    assert!(api.list(&ListParams::default()).await.unwrap().items.is_empty());
}
