/* Force-included (gcc -include) into every stand-in and C example source by rgpu.shims when the build machine's
 * glibc is 2.34 or newer (-DRGPU_GLIBC_COMPAT). glibc 2.34 moved libdl and libpthread into libc and gave their
 * functions new default symbol versions; a binary linked there needs glibc >= 2.34 to load, although the old
 * versions are still provided. Binding the few functions the stand-ins use to their original versions (and
 * linking libdl.so.2 and libpthread.so.0, where older glibc defines them) lets one wheel built here load on
 * glibc 2.28 (manylinux_2_28). `auditwheel show` and tests/test_product.py check what versions remain.
 * No includes here: <features.h> pulled in before a source's own feature macros would override them. */
#ifdef RGPU_GLIBC_COMPAT
#if defined(__x86_64__)
#define RGPU_GLIBC_BASE "GLIBC_2.2.5"
#elif defined(__aarch64__)
#define RGPU_GLIBC_BASE "GLIBC_2.17"
#endif
#ifdef RGPU_GLIBC_BASE
__asm__(".symver dlopen, dlopen@" RGPU_GLIBC_BASE);
__asm__(".symver dlsym, dlsym@" RGPU_GLIBC_BASE);
#if defined(__x86_64__) /* dladdr1 came after x86-64's first glibc; aarch64's first already had it */
__asm__(".symver dladdr1, dladdr1@GLIBC_2.3.3");
#else
__asm__(".symver dladdr1, dladdr1@" RGPU_GLIBC_BASE);
#endif
__asm__(".symver dlerror, dlerror@" RGPU_GLIBC_BASE);
__asm__(".symver pthread_once, pthread_once@" RGPU_GLIBC_BASE);
/* (helper threads: quiet_thread.c; conn_links.c joins its own) */
__asm__(".symver pthread_create, pthread_create@" RGPU_GLIBC_BASE);
__asm__(".symver pthread_join, pthread_join@" RGPU_GLIBC_BASE);
__asm__(".symver pthread_mutex_trylock, pthread_mutex_trylock@" RGPU_GLIBC_BASE);
__asm__(".symver pthread_sigmask, pthread_sigmask@" RGPU_GLIBC_BASE);

#ifdef RGPU_GLIBC_COMPAT_START
/* A program's start code (Scrt1.o of glibc >= 2.34) calls __libc_start_main@GLIBC_2.34; the examples are linked
 * with --wrap=__libc_start_main so it calls this instead, which calls the original version. That one runs the
 * program's constructors itself only on glibc >= 2.34 (the start code passes none): the examples have none. */
int rgpu_libc_start_main_base(int (*main)(int, char **, char **), int argc, char **argv, void (*init)(void),
                              void (*fini)(void), void (*rtld_fini)(void), void *stack_end);
__asm__(".symver rgpu_libc_start_main_base, __libc_start_main@" RGPU_GLIBC_BASE);

int __wrap___libc_start_main(int (*main)(int, char **, char **), int argc, char **argv, void (*init)(void),
                             void (*fini)(void), void (*rtld_fini)(void), void *stack_end)
{
    return rgpu_libc_start_main_base(main, argc, argv, init, fini, rtld_fini, stack_end);
}
#endif
#endif
#endif
