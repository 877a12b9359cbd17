pub mod env;
pub mod managed;
pub mod parse;
pub mod read;
pub mod state;
pub mod store;
pub mod watch;
