//! A real etcd and kube-apiserver for tests, started the way controller-runtime's
//! envtest starts them: `KUBEBUILDER_ASSETS` names a directory holding `etcd`,
//! `kube-apiserver` and `kubectl`; when it is unset, `scripts/kube-test-assets.sh`
//! provisions one (on Debian, once per machine, cached outside the checkout).
//!
//! The API server authenticates static tokens: an administrator (`system:masters`) and
//! the two ServiceAccounts that `manifests/` binds, so that a test can run the
//! controller and the node agent under exactly the RBAC the manifests grant.
//!
//! Both children are tethered to the test process: each runs under a shell that kills
//! it when the test process's end of a pipe closes, so nothing outlives a test binary,
//! even one killed with SIGKILL.

use std::io::Write as _;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};

/// The namespace `manifests/` installs the controller into, and its ServiceAccount.
pub const SYSTEM_NAMESPACE: &str = "agentplane-system";
pub const CONTROLLER_SERVICE_ACCOUNT: &str = "agentplane-controller";
/// The egress proxy's ServiceAccount (manifests/egress-proxy.yaml).
pub const EGRESS_PROXY_SERVICE_ACCOUNT: &str = "agentplane-egress-proxy";
/// The node agent runs in the namespace of its Sandbox (`default` in `manifests/`).
pub const NODE_AGENT_NAMESPACE: &str = "default";
pub const NODE_AGENT_SERVICE_ACCOUNT: &str = "agentplane-node-agent";

/// How long a cold API server may take to answer `/readyz`.
const START_PATIENCE: Duration = Duration::from_secs(90);

/// How many times a start whose programs exit early is tried.
const START_ATTEMPTS: usize = 3;

/// Why a start failed: a program exited before the API server was ready (worth
/// another try on other ports), or anything else.
enum Start {
    Exited(String),
    Failed(String),
}

impl From<String> for Start {
    fn from(why: String) -> Start {
        Start::Failed(why)
    }
}

/// A running etcd + kube-apiserver pair.
pub struct ApiServer {
    /// `https://127.0.0.1:PORT`.
    pub url: String,
    /// The directory holding `etcd`, `kube-apiserver` and `kubectl`.
    pub assets: PathBuf,
    /// A kubeconfig for the administrator.
    pub kubeconfig: PathBuf,
    pub admin_token: String,
    /// The token of `system:serviceaccount:agentplane-system:agentplane-controller`.
    pub controller_token: String,
    /// The token of `system:serviceaccount:default:agentplane-node-agent`.
    pub node_agent_token: String,
    /// Authenticates as the egress proxy's ServiceAccount.
    pub egress_proxy_token: String,
    dir: PathBuf,
    tethers: Vec<Tether>,
}

/// A child that dies when its tether (the write end of its shell's stdin) is dropped.
struct Tether {
    name: &'static str,
    child: Child,
    stdin: Option<ChildStdin>,
    /// The program's output, open for reading: readable after its file is removed.
    log: std::fs::File,
}

impl Tether {
    /// Starts `program`; `cleanup`, when given, is removed once it has exited (the
    /// API server's directory, with etcd's data, lives in memory under /dev/shm).
    fn spawn(
        name: &'static str,
        program: &Path,
        args: &[String],
        dir: &Path,
        cleanup: Option<&Path>,
    ) -> Result<Tether, String> {
        let log = dir.join(format!("{name}.log"));
        let out = std::fs::File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?;
        let reader = std::fs::File::open(&log).map_err(|e| format!("{}: {e}", log.display()))?;
        let err = out.try_clone().map_err(|e| e.to_string())?;
        // The shell runs the program and ends when it ends, so that a program that
        // dies at start (a port taken since `free_ports`) is seen at once; beside it, a
        // watcher stops the program when the shell's stdin closes (a background list's
        // stdin is /dev/null unless redirected, hence fd 3). The log stays readable
        // through `log` after `cleanup` has removed it.
        let script = r#"exec 3<&0
"$@" 3<&- & child=$!
{ read -r _ <&3; kill "$child" 2>/dev/null; } & watcher=$!
wait "$child"; status=$?
kill "$watcher" 2>/dev/null
[ -z "$CLEANUP" ] || rm -rf "$CLEANUP"
exit "$status""#;
        let child = Command::new("sh")
            .env("CLEANUP", cleanup.map(Path::as_os_str).unwrap_or_default())
            .arg("-c")
            .arg(script)
            .arg(name)
            .arg(program)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", program.display()))?;
        let mut tether = Tether { name, child, stdin: None, log: reader };
        tether.stdin = tether.child.stdin.take();
        Ok(tether)
    }

    fn exited(&mut self) -> Option<String> {
        match self.child.try_wait() {
            Ok(Some(status)) => Some(format!("{} exited ({status}); its log:\n{}", self.name, self.tail())),
            _ => None,
        }
    }

    fn tail(&self) -> String {
        use std::io::{Read, Seek};
        let mut bytes = Vec::new();
        let mut log = &self.log;
        let _ = log.seek(std::io::SeekFrom::Start(0)).and_then(|_| log.read_to_end(&mut bytes));
        let text = String::from_utf8_lossy(&bytes);
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }
}

impl Drop for Tether {
    fn drop(&mut self) {
        if let Some(mut stdin) = self.stdin.take() {
            let _ = stdin.write_all(b"\n");
        }
        let _ = self.child.wait();
    }
}

/// `N` loopback ports free now and distinct (each listener is held until all are
/// chosen). Another process may still bind one before its program does: `start`
/// tries again then.
fn free_ports<const N: usize>() -> Result<[u16; N], String> {
    let listeners = (0..N).map(|_| TcpListener::bind("127.0.0.1:0")).collect::<Result<Vec<_>, _>>();
    let listeners = listeners.map_err(|e| e.to_string())?;
    let mut ports = [0; N];
    for (port, listener) in ports.iter_mut().zip(&listeners) {
        *port = listener.local_addr().map_err(|e| e.to_string())?.port();
    }
    Ok(ports)
}

fn token() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

fn run(cmd: &mut Command) -> Result<String, String> {
    let out = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!("{cmd:?}: {}\n{}", out.status, String::from_utf8_lossy(&out.stderr)))
    }
}

/// The assets directory: `KUBEBUILDER_ASSETS`, else what the provisioning script
/// prints (it builds once per machine and then answers from its cache).
pub fn assets() -> Result<PathBuf, String> {
    static ASSETS: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    ASSETS
        .get_or_init(|| {
            let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/kube-test-assets.sh");
            let out = Command::new("bash")
                .arg(&script)
                .stderr(Stdio::inherit())
                .output()
                .map_err(|e| format!("{}: {e}", script.display()))?;
            if !out.status.success() {
                return Err(format!("{} failed ({})", script.display(), out.status));
            }
            Ok(PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
        })
        .clone()
}

/// A kubeconfig that authenticates with `token`.
pub fn kubeconfig_yaml(url: &str, token: &str, namespace: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: envtest\n  cluster:\n    server: {url}\n    insecure-skip-tls-verify: true\n\
         users:\n- name: envtest\n  user:\n    token: {token}\ncontexts:\n- name: envtest\n  context:\n    cluster: envtest\n    user: envtest\n    namespace: {namespace}\n\
         current-context: envtest\n"
    )
}

impl ApiServer {
    /// One API server per test binary, started on first use. Tests share it and keep
    /// apart by namespace.
    pub fn shared() -> &'static ApiServer {
        static SHARED: OnceLock<Result<ApiServer, String>> = OnceLock::new();
        match SHARED.get_or_init(ApiServer::start) {
            Ok(server) => server,
            Err(e) => panic!("cannot start etcd and kube-apiserver: {e}"),
        }
    }

    /// Starts etcd and kube-apiserver on free loopback ports and waits until the API
    /// server is ready and has its `default` namespace. A start where either exits
    /// before that (most likely a port that something else bound between `free_ports`
    /// and the program's own bind) is tried again on other ports, up to three times.
    pub fn start() -> Result<ApiServer, String> {
        let mut exits = Vec::new();
        while exits.len() < START_ATTEMPTS {
            match ApiServer::start_once() {
                Ok(server) => return Ok(server),
                Err(Start::Exited(why)) => {
                    eprintln!("envtest: a start failed, trying again on other ports: {why}");
                    exits.push(why);
                }
                Err(Start::Failed(why)) => return Err(why),
            }
        }
        Err(format!("{START_ATTEMPTS} starts failed:\n{}", exits.join("\n---\n")))
    }

    fn start_once() -> Result<ApiServer, Start> {
        static COUNT: AtomicU32 = AtomicU32::new(0);
        let assets = assets()?;
        let base = if Path::new("/dev/shm").is_dir() { PathBuf::from("/dev/shm") } else { std::env::temp_dir() };
        let dir =
            base.join(format!("agentplane-envtest-{}-{}", std::process::id(), COUNT.fetch_add(1, Ordering::Relaxed)));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;

        let sa_key = dir.join("sa.key");
        let sa_pub = dir.join("sa.pub");
        run(Command::new("openssl").args(["genrsa", "-out"]).arg(&sa_key).arg("2048"))?;
        run(Command::new("openssl").arg("rsa").arg("-in").arg(&sa_key).arg("-pubout").arg("-out").arg(&sa_pub))?;

        let (admin_token, controller_token, node_agent_token, egress_proxy_token) =
            (token(), token(), token(), token());
        let groups = |ns: &str| format!("system:serviceaccounts,system:serviceaccounts:{ns},system:authenticated");
        let tokens = format!(
            "{admin_token},admin,admin,\"system:masters\"\n\
             {controller_token},system:serviceaccount:{SYSTEM_NAMESPACE}:{CONTROLLER_SERVICE_ACCOUNT},controller,\"{}\"\n\
             {node_agent_token},system:serviceaccount:{NODE_AGENT_NAMESPACE}:{NODE_AGENT_SERVICE_ACCOUNT},node-agent,\"{}\"\n\
             {egress_proxy_token},system:serviceaccount:{SYSTEM_NAMESPACE}:{EGRESS_PROXY_SERVICE_ACCOUNT},egress-proxy,\"{}\"\n",
            groups(SYSTEM_NAMESPACE),
            groups(NODE_AGENT_NAMESPACE),
            groups(SYSTEM_NAMESPACE),
        );
        std::fs::write(dir.join("tokens.csv"), tokens).map_err(|e| e.to_string())?;

        let [etcd_port, peer_port, api_port] = free_ports()?;
        let etcd_url = format!("http://127.0.0.1:{etcd_port}");
        let mut tethers = Vec::new();
        tethers.push(Tether::spawn(
            "etcd",
            &assets.join("etcd"),
            &[
                format!("--data-dir={}", dir.join("etcd").display()),
                format!("--listen-client-urls={etcd_url}"),
                format!("--advertise-client-urls={etcd_url}"),
                format!("--listen-peer-urls=http://127.0.0.1:{peer_port}"),
                format!("--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}"),
                format!("--initial-cluster=default=http://127.0.0.1:{peer_port}"),
                "--log-level=warn".into(),
            ],
            &dir,
            // etcd stops last: its tether removes the whole directory, even when the
            // test process dies without dropping anything (the shared server never is).
            Some(&dir),
        )?);
        let cert_dir = dir.join("certs");
        tethers.push(Tether::spawn(
            "kube-apiserver",
            &assets.join("kube-apiserver"),
            &[
                format!("--etcd-servers={etcd_url}"),
                format!("--cert-dir={}", cert_dir.display()),
                format!("--secure-port={api_port}"),
                "--bind-address=127.0.0.1".into(),
                "--advertise-address=127.0.0.1".into(),
                "--insecure-port=0".into(),
                "--service-cluster-ip-range=10.0.0.0/24".into(),
                "--allow-privileged=true".into(),
                // No controller-manager mints ServiceAccount tokens here.
                "--disable-admission-plugins=ServiceAccount".into(),
                "--authorization-mode=RBAC".into(),
                format!("--token-auth-file={}", dir.join("tokens.csv").display()),
                "--service-account-issuer=https://kubernetes.default.svc".into(),
                format!("--service-account-key-file={}", sa_pub.display()),
                format!("--service-account-signing-key-file={}", sa_key.display()),
                "--v=0".into(),
            ],
            &dir,
            None,
        )?);

        let url = format!("https://127.0.0.1:{api_port}");
        let kubeconfig = dir.join("admin.kubeconfig");
        std::fs::write(&kubeconfig, kubeconfig_yaml(&url, &admin_token, "default")).map_err(|e| e.to_string())?;
        let mut server = ApiServer {
            url,
            assets,
            kubeconfig,
            admin_token,
            controller_token,
            node_agent_token,
            egress_proxy_token,
            dir,
            tethers,
        };
        server.wait_ready()?;
        Ok(server)
    }

    fn wait_ready(&mut self) -> Result<(), Start> {
        let deadline = Instant::now() + START_PATIENCE;
        loop {
            for tether in &mut self.tethers {
                if let Some(why) = tether.exited() {
                    return Err(Start::Exited(why));
                }
            }
            let ready = run(self.kubectl().args(["get", "--raw", "/readyz"]))
                .and_then(|_| run(self.kubectl().args(["get", "namespace", "default", "-o", "name"])));
            let last = match ready {
                Ok(_) => return Ok(()),
                Err(e) => e,
            };
            if Instant::now() > deadline {
                let logs: Vec<String> = self.tethers.iter().map(|t| format!("{}:\n{}", t.name, t.tail())).collect();
                return Err(Start::Failed(format!("not ready after {START_PATIENCE:?}: {last}\n{}", logs.join("\n"))));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// `kubectl` from the assets, as the administrator.
    pub fn kubectl(&self) -> Command {
        let mut cmd = Command::new(self.assets.join("kubectl"));
        cmd.arg("--kubeconfig").arg(&self.kubeconfig);
        cmd
    }

    /// Runs `kubectl -n NAMESPACE ARGS` as the administrator with `stdin` (or none) on
    /// its standard input and returns its stdout; a failure panics with its stderr.
    pub fn kubectl_in(&self, namespace: &str, args: &[&str], stdin: Option<&str>) -> String {
        let mut child = self
            .kubectl()
            .args(["-n", namespace])
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("kubectl runs");
        child
            .stdin
            .take()
            .expect("stdin is piped")
            .write_all(stdin.unwrap_or_default().as_bytes())
            .expect("kubectl reads its input");
        let out = child.wait_with_output().expect("kubectl runs");
        assert!(out.status.success(), "kubectl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).expect("kubectl prints UTF-8")
    }

    /// Writes a kubeconfig for `token` into the server's directory and returns its path.
    pub fn kubeconfig_for(&self, name: &str, token: &str, namespace: &str) -> PathBuf {
        let path = self.dir.join(format!("{name}.kubeconfig"));
        std::fs::write(&path, kubeconfig_yaml(&self.url, token, namespace)).expect("the envtest directory is writable");
        path
    }

    /// A client configured from `kubeconfig` (make one per runtime: a client belongs
    /// to the runtime that built it).
    pub async fn client_from(kubeconfig: &Path) -> kube::Client {
        let config = Kubeconfig::read_from(kubeconfig).expect("a readable kubeconfig");
        let config = kube::Config::from_custom_kubeconfig(config, &KubeConfigOptions::default())
            .await
            .expect("a valid kubeconfig");
        kube::Client::try_from(config).expect("a client")
    }

    /// A client as the administrator.
    pub async fn client(&self) -> kube::Client {
        Self::client_from(&self.kubeconfig).await
    }

    /// Applies the agentplane CRDs and waits until each is established.
    pub async fn install_crds(&self) {
        let client = self.client().await;
        let api: Api<CustomResourceDefinition> = Api::all(client);
        let params = PatchParams::apply("agentplane-envtest").force();
        for crd in agentplane_crds::crds() {
            let name = crd.metadata.name.clone().expect("a CRD has a name");
            api.patch(&name, &params, &Patch::Apply(&crd)).await.expect("the CRD applies");
            let deadline = Instant::now() + Duration::from_secs(30);
            loop {
                let got = api.get(&name).await.expect("the CRD reads back");
                let established = got
                    .status
                    .and_then(|s| s.conditions)
                    .unwrap_or_default()
                    .iter()
                    .any(|c| c.type_ == "Established" && c.status == "True");
                if established {
                    break;
                }
                assert!(Instant::now() < deadline, "CRD {name} not established after 30 s");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }

    /// Creates a namespace with a name unique to this run (namespaces keep tests apart).
    pub async fn namespace(&self, prefix: &str) -> String {
        use k8s_openapi::api::core::v1::Namespace;
        let name = format!("{prefix}-{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
        let api: Api<Namespace> = Api::all(self.client().await);
        let ns: Namespace =
            serde_json::from_value(serde_json::json!({"metadata": {"name": name}})).expect("a namespace");
        api.create(&Default::default(), &ns).await.expect("the namespace is created");
        name
    }
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        // The API server first, then etcd.
        while let Some(tether) = self.tethers.pop() {
            drop(tether);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("agentplane-envtest-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn sh(script: &str) -> (PathBuf, Vec<String>) {
        (PathBuf::from("/bin/sh"), vec!["-c".into(), script.into()])
    }

    /// A program that dies at start is seen while the tether still holds it: the
    /// shell ends with it instead of waiting for its stdin. Its log is quoted though
    /// the directory holding it was cleaned up as it ended.
    #[test]
    fn a_program_that_exits_is_seen_while_tethered() {
        let dir = scratch("exits");
        let (program, args) = sh("echo bind: address already in use; exit 3");
        let mut tether = Tether::spawn("early", &program, &args, &dir, Some(&dir)).unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        let why = loop {
            if let Some(why) = tether.exited() {
                break why;
            }
            assert!(Instant::now() < deadline, "the exit was not seen");
            std::thread::sleep(Duration::from_millis(10));
        };
        assert!(why.contains("exit status: 3"), "{why}");
        assert!(why.contains("address already in use"), "the log's tail is quoted: {why}");
        assert!(!dir.exists(), "cleaned up when the program ended");
        drop(tether);
    }

    /// Dropping the tether still stops a program that runs on, then removes what it
    /// was given to clean.
    #[test]
    fn dropping_the_tether_stops_the_program_and_cleans_up() {
        let dir = scratch("drop");
        let data = dir.join("data");
        std::fs::create_dir_all(&data).unwrap();
        let pid_file = dir.join("pid");
        let (program, args) = sh(&format!("echo $$ > {}.tmp && mv {0}.tmp {0} && exec sleep 1000", pid_file.display()));
        let mut tether = Tether::spawn("long", &program, &args, &dir, Some(&data)).unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        let pid = loop {
            if let Ok(pid) = std::fs::read_to_string(&pid_file) {
                break pid.trim().to_string();
            }
            assert!(tether.exited().is_none(), "the program runs on");
            assert!(Instant::now() < deadline, "the program did not start");
            std::thread::sleep(Duration::from_millis(10));
        };
        assert!(Path::new(&format!("/proc/{pid}")).exists());
        drop(tether);
        assert!(!Path::new(&format!("/proc/{pid}")).exists(), "the program is stopped and reaped");
        assert!(!data.exists(), "its directory is removed");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
