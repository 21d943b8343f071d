/*
 * main.c - retryd: start-up, wiring and the signal loop.
 *
 * Key decision: signals are blocked in every thread and the main thread waits
 * for them with sigwaitinfo(), so a signal is an ordinary event of one loop
 * (OpenBSD httpd style): SIGHUP reloads the reloadable keys, SIGTERM and
 * SIGINT drain (stop taking work, let callbacks in flight finish within the
 * grace, hand back the rest) and exit 0.  Everything that can fail fatally
 * fails here, before the first request; at run time nothing exits.
 */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "api/api.h"
#include "api/http.h"
#include "conf.h"
#include "restore.h"
#include "scheduler/sched.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/xmalloc.h"
#include "wire.h"

static void
usage(FILE *f)
{
	fprintf(f,
	    "usage: retryd [-c FILE] [-n] [-r] [-V] [-K] [-R]\n"
	    "  -c FILE  read the configuration from FILE (default: none,\n"
	    "           the built-in defaults and the environment)\n"
	    "  -n       check the configuration and exit (0 good, 2 bad)\n"
	    "  -r, --recover\n"
	    "           rebuild Redis from the journal (tenants, keys,\n"
	    "           topics, unfinished jobs) and exit (0 done, 1 not)\n"
	    "  -V, --version\n"
	    "           print the version and exit\n"
	    "  -K       list the configuration keys and exit\n"
	    "  -R       list the HTTP routes and exit\n"
	    "  -h, --help\n"
	    "           this help\n");
}

static void
raise_nofile(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) == -1)
		return;
	if (rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		if (setrlimit(RLIMIT_NOFILE, &rl) == -1)
			log_warn("cannot raise the open file limit");
	}
	getrlimit(RLIMIT_NOFILE, &rl);
	if ((int64_t)rl.rlim_cur < conf.http_max_connections + 256)
		log_warnx("http.max_connections is %lld but only %llu file "
		    "descriptors are allowed (ulimit -n)",
		    (long long)conf.http_max_connections,
		    (unsigned long long)rl.rlim_cur);
}

static void
print_routes(void)
{
	const struct api_route *const *set;
	const struct api_route *r;

	for (set = api_all_routes; *set != NULL; set++)
		for (r = *set; r->method != NULL; r++)
			printf("%s %s\n", r->method, r->pattern);
}

int
main(int argc, char *argv[])
{
	const char *path = NULL;
	char err[1024], bound[300];
	static const struct option longopts[] = {
		{ "recover", no_argument, NULL, 'r' },
		{ "version", no_argument, NULL, 'V' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int ch, check_only = 0, recover = 0, fd, sig;
	struct wire *w;
	sigset_t set;

	while ((ch = getopt_long(argc, argv, "c:nrVKRh", longopts, NULL)) !=
	    -1) {
		switch (ch) {
		case 'c':
			path = optarg;
			break;
		case 'n':
			check_only = 1;
			break;
		case 'r':
			recover = 1;
			break;
		case 'V':
			printf("retryd %s\n", PACKAGE_VERSION);
			return 0;
		case 'K':
			conf_print_keys();
			return 0;
		case 'R':
			print_routes();
			return 0;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind != argc) {
		usage(stderr);
		return 2;
	}
	if (conf_load(&conf, path, err, sizeof(err)) == -1) {
		fprintf(stderr, "%s\n", err);
		return 2;
	}
	if (check_only) {
		if (path != NULL)
			fprintf(stderr, "%s: configuration OK\n", path);
		conf_free(&conf);
		return 0;
	}

	log_init(conf.instance, (enum log_level)conf.log_level);
	if (recover) {
		/* A one-shot for operators: no HTTP, no deliveries. */
		signal(SIGPIPE, SIG_IGN);
		signal(SIGXFSZ, SIG_IGN);
		recover = restore_recover();
		conf_free(&conf);
		return recover;
	}
	log_info("retryd %s starting (instance %s)", PACKAGE_VERSION,
	    conf.instance);
	if (conf.debug_fake_clock) {
		clock_set_fake(clock_wall_ms());
		log_warnx("debug.fake_clock is on: time moves only when told "
		    "to (tests only)");
	}

	/* Every thread created from here on inherits the blocked signals. */
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	signal(SIGPIPE, SIG_IGN);
	/*
	 * A file size limit (ulimit -f) fails the write that passes it
	 * (EFBIG) instead of killing the daemon: the journal then refuses
	 * pushes with 503, as on a full disk.
	 */
	signal(SIGXFSZ, SIG_IGN);
	raise_nofile();

	if ((fd = api_listen(conf.listen, bound, sizeof(bound), err,
	    sizeof(err))) == -1)
		fatalx("cannot listen on %s", err);
	if ((w = wire_start(fd, err, sizeof(err))) == NULL)
		fatalx("%s", err);
	log_info("http: listening on %s", bound);

	for (;;) {
		sig = sigwaitinfo(&set, NULL);
		if (sig == -1) {
			if (errno != EINTR)
				log_warn("sigwaitinfo");
			continue;
		}
		if (sig == SIGHUP) {
			if (path == NULL) {
				log_info("SIGHUP: no configuration file to "
				    "reload");
				continue;
			}
			if (conf_reload(path, err, sizeof(err)) == -1) {
				log_warnx("SIGHUP: not reloaded: %s", err);
				continue;
			}
			/* Said before the new level can hide it. */
			log_info("SIGHUP: configuration reloaded from %s",
			    path);
			log_set_level((enum log_level)CONF_GET(log_level));
			wire_reloaded(w);
			continue;
		}
		log_info("%s: draining (grace %lld ms)", strsignal(sig),
		    (long long)CONF_GET(shutdown_grace_ms));
		break;
	}
	wire_stop(w, CONF_GET(shutdown_grace_ms));
	log_info("stopped");
	conf_free(&conf);
	return 0;
}
