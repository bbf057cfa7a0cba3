//! Installing a signal handler and handing a signal on to the one found before it:
//! shared by self-paging and the lost-page handler.

/// An `SA_SIGINFO` handler.
pub(crate) type Handler = extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void);

/// Installs `handler` for `signal`; returns the disposition it replaced.
pub(crate) fn install(signal: libc::c_int, handler: Handler, restart: bool) -> std::io::Result<libc::sigaction> {
    // SAFETY: plain sigaction calls with zero-initialised structures.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = handler as *const () as usize;
        action.sa_flags = libc::SA_SIGINFO | if restart { libc::SA_RESTART } else { 0 };
        libc::sigemptyset(&mut action.sa_mask);
        let mut previous: libc::sigaction = std::mem::zeroed();
        if libc::sigaction(signal, &action, &mut previous) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(previous)
    }
}

/// Not ours: hand it to the handler that was there before, or restore the default
/// action so the retried access does what it would have done without us (die).
pub(crate) fn chain(
    previous: Option<libc::sigaction>,
    signal: libc::c_int,
    info: *mut libc::siginfo_t,
    context: *mut libc::c_void,
) {
    // SAFETY: calling or restoring the disposition that was installed before ours.
    unsafe {
        match previous {
            Some(previous) if previous.sa_sigaction != libc::SIG_DFL && previous.sa_sigaction != libc::SIG_IGN => {
                if previous.sa_flags & libc::SA_SIGINFO != 0 {
                    let handler: Handler = std::mem::transmute(previous.sa_sigaction);
                    handler(signal, info, context);
                } else {
                    let handler: extern "C" fn(libc::c_int) = std::mem::transmute(previous.sa_sigaction);
                    handler(signal);
                }
            }
            _ => {
                let mut default: libc::sigaction = std::mem::zeroed();
                default.sa_sigaction = libc::SIG_DFL;
                libc::sigaction(signal, &default, std::ptr::null_mut());
            }
        }
    }
}
