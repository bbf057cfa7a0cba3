//! Messages to the user from inside the program's own calls (allocation, `mmap`,
//! `fork`, ...): formatted into a buffer on the stack and written with one raw
//! `write(2)` to stderr, so saying something never allocates, takes no lock and cannot
//! panic. `eprintln!` panics when stderr is a closed pipe (redis and memcached ignore
//! SIGPIPE), and a panic in an `extern "C"` function aborts the program.

use std::fmt::{self, Write};

/// Longest message; a longer one is cut (and still ends in a newline).
const MESSAGE_BYTES_MAX: usize = 1024;

struct Message {
    bytes: [u8; MESSAGE_BYTES_MAX],
    len: usize,
}

impl Write for Message {
    fn write_str(&mut self, text: &str) -> fmt::Result {
        // One byte is kept for the newline.
        let room = MESSAGE_BYTES_MAX - 1 - self.len;
        let take = text.len().min(room);
        self.bytes[self.len..self.len + take].copy_from_slice(&text.as_bytes()[..take]);
        self.len += take;
        Ok(())
    }
}

/// Writes `arguments` and a newline to stderr; errors (a closed pipe) are ignored.
pub(crate) fn write_message(arguments: fmt::Arguments<'_>) {
    let mut message = Message { bytes: [0; MESSAGE_BYTES_MAX], len: 0 };
    // `Message::write_str` never fails; a `Display` of ours that did would only cut it.
    let _ = message.write_fmt(arguments);
    message.bytes[message.len] = b'\n';
    let mut written = 0;
    while written <= message.len {
        let rest = &message.bytes[written..=message.len];
        // SAFETY: writes bytes of our own buffer to the process's stderr descriptor.
        let done = unsafe { libc::write(libc::STDERR_FILENO, rest.as_ptr().cast(), rest.len()) };
        if done <= 0 {
            return;
        }
        written += done as usize;
    }
}

/// `eprintln!` for the preload library: see the module docs.
macro_rules! say {
    ($($argument:tt)*) => {
        $crate::say::write_message(format_args!($($argument)*))
    };
}
pub(crate) use say;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_message_is_cut_and_ends_in_a_newline() {
        let mut message = Message { bytes: [0; MESSAGE_BYTES_MAX], len: 0 };
        let long = "x".repeat(3 * MESSAGE_BYTES_MAX);
        message.write_fmt(format_args!("{long}")).unwrap();
        assert_eq!(message.len, MESSAGE_BYTES_MAX - 1);
        message.write_str("more").unwrap();
        assert_eq!(message.len, MESSAGE_BYTES_MAX - 1, "nothing past the room kept for the newline");
    }
}
