/* The pod sandbox's process for the bed's real node: no registry can be reached, so containerd's
 * sandbox image is this program, built with gcc when a bed starts.  It holds the pod's
 * namespaces open, reaps children it inherits (a shared PID namespace makes it PID 1), and
 * exits at once on SIGINT or SIGTERM. */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void on_stop(int sig) { (void)sig; _exit(0); }

static void on_child(int sig) {
	(void)sig;
	while (waitpid(-1, NULL, WNOHANG) > 0) {
	}
}

int main(int argc, char **argv) {
	struct sigaction stop, child;
	if (argc > 1 && strcmp(argv[1], "-v") == 0) {
		puts("fluxinfra-bed-pause 1");
		return 0;
	}
	memset(&stop, 0, sizeof stop);
	stop.sa_handler = on_stop;
	memset(&child, 0, sizeof child);
	child.sa_handler = on_child;
	child.sa_flags = SA_NOCLDSTOP | SA_RESTART;
	if (sigaction(SIGINT, &stop, NULL) || sigaction(SIGTERM, &stop, NULL) ||
	    sigaction(SIGCHLD, &child, NULL)) {
		perror("pause: sigaction");
		return 1;
	}
	for (;;)
		pause();
}
