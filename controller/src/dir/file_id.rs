//! A directory or file as the kernel knows it: (device, inode). Two paths with the same
//! id are one thing, whatever symlinks or bind mounts lead there. The walk, the watcher
//! and the record of what sandboxes can write all speak of folders this way.

pub type FileId = (u64, u64);
