pub mod env;
pub mod parse;
pub mod read;
pub mod state;
pub mod store;
pub mod watch;
