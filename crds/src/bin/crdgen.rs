//! Writes the CRD YAML from the Rust types, so the committed YAML never drifts from
//! them (a test checks it). Without an argument it writes both `crds/` and
//! `manifests/crds/`: kustomize of kubectl before 1.21 only takes `resources:` inside
//! the kustomization's own directory, so the manifests carry their own copy rather
//! than pointing at `crds/`. With a directory argument it writes there only.

use std::path::PathBuf;

fn main() {
    let dirs = match std::env::args_os().nth(1) {
        Some(dir) => vec![PathBuf::from(dir)],
        None => agentplane_crds::crd_dirs(),
    };
    for dir in dirs {
        for crd in agentplane_crds::crds() {
            let path = dir.join(agentplane_crds::crd_file_name(&crd));
            if let Err(e) = std::fs::write(&path, agentplane_crds::crd_yaml(&crd)) {
                eprintln!("error: writing {}: {e}", path.display());
                std::process::exit(1);
            }
            println!("{}", path.display());
        }
    }
}
