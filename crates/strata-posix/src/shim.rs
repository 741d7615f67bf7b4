//! Exported variadic entry points. Each is a naked tail jump into the C shim
//! (csrc/shim.c), which reads the optional argument with `va_arg` and calls
//! back into Rust (`strata_posix_open` / `_openat` / `_fcntl`).

extern "C" {
    fn strata_shim_open();
    fn strata_shim_open64();
    fn strata_shim_openat();
    fn strata_shim_openat64();
    fn strata_shim_fcntl();
    fn strata_shim_fcntl64();
}

macro_rules! trampoline {
    ($($name:ident => $target:ident),* $(,)?) => {$(
        #[unsafe(naked)]
        #[no_mangle]
        pub unsafe extern "C" fn $name() {
            #[cfg(target_arch = "x86_64")]
            core::arch::naked_asm!("jmp {t}", t = sym $target);
            #[cfg(target_arch = "aarch64")]
            core::arch::naked_asm!("b {t}", t = sym $target);
        }
    )*};
}

trampoline! {
    open => strata_shim_open,
    open64 => strata_shim_open64,
    openat => strata_shim_openat,
    openat64 => strata_shim_openat64,
    fcntl => strata_shim_fcntl,
    fcntl64 => strata_shim_fcntl64,
}
