/* The sanitized plugin's own defaults (`make plugin-sanitized`, build/plugin-asan/): linked
 * into that build only, never into the product. They travel with the binary because the
 * tests exec it with an environment of their own making (CNI_* and PATH only), where
 * ASAN_OPTIONS would not reach it; an ASAN_OPTIONS or UBSAN_OPTIONS that does reach it
 * still has the last word.
 *
 * A report stops the plugin (halt_on_error; -fno-sanitize-recover=all for UBSan) with
 * SIGABRT, an exit no CNI answer has, and goes to NETCTL_SANITIZER_LOG.<pid>
 * (build/plugin-asan/reports/report.<pid>), where the tests look after each test
 * (tests/conftest.py): a test fails on any report, also one whose plugin was expected to
 * fail.
 *
 * Leaks are not looked for here: the plugin frees nothing by design (one short exec, the
 * exit frees it: main.c, buf.h), so at exit every buffer it used would be reported. What
 * such a process must keep instead, memory in proportion to its input, the fuzz targets
 * check (tests/fuzz/arena.c). */

#ifndef NETCTL_SANITIZER_LOG
#error "NETCTL_SANITIZER_LOG: the path prefix of the reports (the Makefile gives it)"
#endif

#define COMMON "halt_on_error=1:abort_on_error=1:print_stacktrace=1:log_path=" \
	NETCTL_SANITIZER_LOG

const char *__asan_default_options(void);
const char *__ubsan_default_options(void);

const char *__asan_default_options(void)
{
	return COMMON ":detect_leaks=0:detect_stack_use_after_return=1:strict_string_checks=1";
}

const char *__ubsan_default_options(void)
{
	return COMMON;
}
