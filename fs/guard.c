/* SIGBUS in a segment's mapping: see guard.h. */
#include "guard.h"

#include <signal.h>
#include <string.h>

_Thread_local sigjmp_buf *volatile guard_jb;
_Thread_local void *volatile guard_fault_addr;

static void on_sigbus(int sig, siginfo_t *si, void *uc)
{
	(void)uc;
	sigjmp_buf *jb = guard_jb;
	if (jb && si->si_code > 0) { /* raised by the kernel for an access */
		guard_fault_addr = si->si_addr;
		siglongjmp(*jb, 1);
	}
	/* not a guarded read: what SIGBUS always did */
	signal(sig, SIG_DFL);
	raise(sig);
}

int guard_install(void)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_sigaction = on_sigbus;
	/* SA_NODEFER: sigsetjmp(, 0) does not restore the signal mask, so
	 * SIGBUS must not stay blocked after the jump out of the handler */
	sa.sa_flags = SA_SIGINFO | SA_NODEFER;
	sigemptyset(&sa.sa_mask);
	return sigaction(SIGBUS, &sa, NULL);
}
