//! `println!`, `print!`, `eprintln!` and `eprint!` for this crate, in place of std's,
//! which panic when the stream is closed ("failed printing to stdout: Broken pipe",
//! exit 101, for `agentplane describe process shell | head -3`). These write through
//! [`crate::printing`], which ends a command quietly when its reader has gone.

macro_rules! println {
    () => { $crate::printing::write_stdout(format_args!("\n")) };
    ($($arg:tt)*) => { $crate::printing::write_stdout(format_args!("{}\n", format_args!($($arg)*))) };
}

macro_rules! print {
    ($($arg:tt)*) => { $crate::printing::write_stdout(format_args!($($arg)*)) };
}

macro_rules! eprintln {
    () => { $crate::printing::write_stderr(format_args!("\n")) };
    ($($arg:tt)*) => { $crate::printing::write_stderr(format_args!("{}\n", format_args!($($arg)*))) };
}

macro_rules! eprint {
    ($($arg:tt)*) => { $crate::printing::write_stderr(format_args!($($arg)*)) };
}
