//! Writes the CRD YAML into `crds/` (or the directory given) from the Rust types, so
//! the committed YAML never drifts from them (a test checks it).

use std::path::PathBuf;

fn main() {
    let dir = std::env::args_os()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    for crd in agentplane_crds::crds() {
        let path = dir.join(agentplane_crds::crd_file_name(&crd));
        if let Err(e) = std::fs::write(&path, agentplane_crds::crd_yaml(&crd)) {
            eprintln!("error: writing {}: {e}", path.display());
            std::process::exit(1);
        }
        println!("{}", path.display());
    }
}
