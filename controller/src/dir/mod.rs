pub mod env;
pub mod managed;
pub mod parse;
pub mod pools;
pub mod read;
pub mod state;
pub mod store;
pub mod watch;
