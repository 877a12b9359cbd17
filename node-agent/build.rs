//! The web inspector (`ui/dist/`, see `api::ui`) is embedded at compile time: a file
//! changed there rebuilds the node agent by itself (it is included), but one added or
//! removed would not, so the folder is watched too.

fn main() {
    let dist = std::path::Path::new("../ui/dist");
    if dist.is_dir() {
        // Cargo looks at every file under a folder named here.
        println!("cargo::rerun-if-changed=../ui/dist");
    } else {
        // Without it (a checkout that lacks the build) there is nothing to watch but
        // its coming: its parent, or this script.
        let parent = if std::path::Path::new("../ui").is_dir() { "../ui" } else { "build.rs" };
        println!("cargo::rerun-if-changed={parent}");
    }
}
