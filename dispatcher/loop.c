/*
 * loop.c - one dispatcher thread: epoll driving a libcurl multi handle.
 *
 * Key decision: libcurl says which sockets to watch (CURLMOPT_SOCKETFUNCTION)
 * and when it wants to run next (CURLMOPT_TIMERFUNCTION); we watch them with
 * epoll and tell it what happened with curl_multi_socket_action(), so a
 * wake-up costs in proportion to the sockets that are ready, not to the
 * thousands of transfers in flight (curl docs/examples/multi-event.c, with
 * epoll for libevent).  Every reason to wake is an fd: the sockets, libcurl's
 * timer and the drain deadline (relative CLOCK_MONOTONIC timerfds), and an
 * eventfd that other threads write after queueing work or a command.
 * libcurl's "run now" (a 0 timeout, at every transfer added) is a flag served
 * before the next epoll_wait, and its timerfd is re-armed only when the
 * deadline moves earlier (struct disp_timer): a timerfd_settime per transfer
 * was an eighth of the daemon's time in a burst.  The timers are real time
 * on purpose: libcurl measures time itself, so the test
 * clock of util/clock.h must not move them.  Each pass over the queue starts
 * at most DISP_LOOP_BATCH transfers before serving the sockets again.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "dispatcher/disp_int.h"
#include "util/clock.h"
#include "util/log.h"

#define DISP_LOOP_EVENTS	256
#define DISP_LOOP_BATCH		256

static void
loop_wake(struct disp_loop *l)
{
	uint64_t one = 1;

	/* EAGAIN means the counter is already non-zero: awake anyway. */
	if (write(l->wakefd, &one, sizeof(one)) == -1 && errno != EAGAIN)
		log_warn("dispatcher %d: eventfd write", l->idx);
}

static void
fd_consume(int fd)
{
	uint64_t n;

	if (read(fd, &n, sizeof(n)) == -1 && errno != EAGAIN)
		log_warn("dispatcher: read from timerfd or eventfd");
}

/* ms < 0 disarms; 0 fires at once. */
static void
timer_arm(int fd, int64_t ms)
{
	struct itimerspec its;

	memset(&its, 0, sizeof(its));
	if (ms == 0)
		its.it_value.tv_nsec = 1;
	else if (ms > 0) {
		its.it_value.tv_sec = (time_t)(ms / 1000);
		its.it_value.tv_nsec = (long)(ms % 1000) * 1000000;
	}
	if (timerfd_settime(fd, 0, &its, NULL) == -1)
		log_warn("dispatcher: timerfd_settime");
}

static int
socket_cb(CURL *easy, curl_socket_t s, int what, void *userp, void *socketp)
{
	struct disp_loop *l = userp;
	struct epoll_event ev;
	int op;

	if (what == CURL_POLL_REMOVE) {
		/* The socket may be closed already; that removed it too. */
		(void)epoll_ctl(l->epfd, EPOLL_CTL_DEL, s, NULL);
		return 0;
	}
	memset(&ev, 0, sizeof(ev));
	ev.events = ((what & CURL_POLL_IN) ? EPOLLIN : 0) |
	    ((what & CURL_POLL_OUT) ? EPOLLOUT : 0);
	ev.data.fd = s;
	op = socketp == NULL ? EPOLL_CTL_ADD : EPOLL_CTL_MOD;
	if (epoll_ctl(l->epfd, op, s, &ev) == -1) {
		op = op == EPOLL_CTL_ADD ? EPOLL_CTL_MOD : EPOLL_CTL_ADD;
		/* Not -1: that would abort every transfer of the multi
		 * handle; this one alone runs into its timeout instead. */
		if (epoll_ctl(l->epfd, op, s, &ev) == -1) {
			log_warn("dispatcher %d: epoll_ctl on socket %d",
			    l->idx, (int)s);
			return 0;
		}
	}
	if (socketp == NULL)
		curl_multi_assign(l->multi, s, l);
	return 0;
}

enum disp_timer_act
disp_timer_plan(struct disp_timer *t, int64_t now_ms, long timeout_ms,
    int64_t *arm_ms)
{
	int64_t dl;

	*arm_ms = 0;
	if (timeout_ms < 0) {
		t->now = 0;
		if (!t->armed)
			return DISP_TIMER_KEEP;
		t->armed = 0;
		return DISP_TIMER_DISARM;
	}
	if (timeout_ms == 0) {
		t->now = 1;
		return DISP_TIMER_KEEP;
	}
	t->now = 0;
	dl = now_ms + timeout_ms;
	/* Firing early costs one curl_multi_timeout(); a syscall per
	 * transfer costs more. */
	if (t->armed && t->armed_ms <= dl)
		return DISP_TIMER_KEEP;
	t->armed = 1;
	t->armed_ms = dl;
	*arm_ms = timeout_ms;
	return DISP_TIMER_ARM;
}

static void
timer_set(struct disp_loop *l, long timeout_ms)
{
	int64_t ms;

	switch (disp_timer_plan(&l->timer, clock_mono_us() / 1000,
	    timeout_ms, &ms)) {
	case DISP_TIMER_ARM:
		timer_arm(l->timerfd, ms);
		break;
	case DISP_TIMER_DISARM:
		timer_arm(l->timerfd, -1);
		break;
	case DISP_TIMER_KEEP:
		break;
	}
}

static int
timer_cb(CURLM *multi, long timeout_ms, void *userp)
{
	(void)multi;
	timer_set(userp, timeout_ms);
	return 0;
}

int
disp_loop_init(struct disp_loop *l, struct dispatcher *d, int idx)
{
	struct epoll_event ev;
	int fds[3], i;

	memset(l, 0, sizeof(*l));
	l->d = d;
	l->idx = idx;
	l->epfd = l->wakefd = l->timerfd = l->drainfd = -1;
	pthread_mutex_init(&l->lock, NULL);
	if ((l->epfd = epoll_create1(EPOLL_CLOEXEC)) == -1 ||
	    (l->wakefd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) == -1 ||
	    (l->timerfd = timerfd_create(CLOCK_MONOTONIC,
	    TFD_NONBLOCK | TFD_CLOEXEC)) == -1 ||
	    (l->drainfd = timerfd_create(CLOCK_MONOTONIC,
	    TFD_NONBLOCK | TFD_CLOEXEC)) == -1)
		return -1;
	fds[0] = l->wakefd;
	fds[1] = l->timerfd;
	fds[2] = l->drainfd;
	for (i = 0; i < 3; i++) {
		memset(&ev, 0, sizeof(ev));
		ev.events = EPOLLIN;
		ev.data.fd = fds[i];
		if (epoll_ctl(l->epfd, EPOLL_CTL_ADD, fds[i], &ev) == -1)
			return -1;
	}
	if ((l->multi = curl_multi_init()) == NULL) {
		errno = ENOMEM;
		return -1;
	}
	curl_multi_setopt(l->multi, CURLMOPT_SOCKETFUNCTION, socket_cb);
	curl_multi_setopt(l->multi, CURLMOPT_SOCKETDATA, l);
	curl_multi_setopt(l->multi, CURLMOPT_TIMERFUNCTION, timer_cb);
	curl_multi_setopt(l->multi, CURLMOPT_TIMERDATA, l);
	curl_multi_setopt(l->multi, CURLMOPT_PIPELINING, CURLPIPE_MULTIPLEX);
	/*
	 * No cap on connections per host (CURLMOPT_MAX_HOST_CONNECTIONS):
	 * over it libcurl queues a transfer with its timeout already
	 * running, so callbacks past the cap timed out unsent or late, and
	 * one tenant's slow receiver held back another tenant's callbacks
	 * to the same host.  What is in flight is bounded before a transfer
	 * starts: the topic's max_in_flight, its tenant's cap and
	 * max_total_in_flight (disp_submit()).
	 */
	/* TLS sessions are shared by the loop's transfers so a new
	 * connection to a known host resumes instead of a full handshake.
	 * One thread uses it: no lock callbacks needed. */
	if ((l->share = curl_share_init()) == NULL) {
		errno = ENOMEM;
		return -1;
	}
	curl_share_setopt(l->share, CURLSHOPT_SHARE,
	    CURL_LOCK_DATA_SSL_SESSION);
	return 0;
}

void
disp_loop_destroy(struct disp_loop *l)
{
	/* The multi handle first: its cleanup reports sockets to remove. */
	if (l->multi != NULL)
		curl_multi_cleanup(l->multi);
	l->multi = NULL;
	/* After every easy handle is gone, or it is still "in use". */
	if (l->share != NULL)
		curl_share_cleanup(l->share);
	l->share = NULL;
	if (l->drainfd != -1)
		close(l->drainfd);
	if (l->timerfd != -1)
		close(l->timerfd);
	if (l->wakefd != -1)
		close(l->wakefd);
	if (l->epfd != -1)
		close(l->epfd);
	l->epfd = l->wakefd = l->timerfd = l->drainfd = -1;
	disp_sign_cache_wipe(&l->sign);
	pthread_mutex_destroy(&l->lock);
}

static void
running_unlink(struct disp_loop *l, struct disp_xfer *x)
{
	if (x->prev != NULL)
		x->prev->next = x->next;
	else
		l->running = x->next;
	if (x->next != NULL)
		x->next->prev = x->prev;
	x->next = x->prev = NULL;
	l->nrunning--;
}

static void
fail_local(struct disp_loop *l, struct disp_xfer *x, int handed_back,
    const char *why)
{
	struct disp_result res;

	disp_result_local(x, &res, handed_back, why);
	if (!handed_back)
		log_obj(LOG_LVL_WARN, &(struct log_obj){ x->req->tenant,
		    x->req->topic, x->req->job_id, x->req->attempt },
		    "callback not sent: %s", why);
	disp_report(l->d, x, &res);
}

static void
xfer_start(struct disp_loop *l, struct disp_xfer *x)
{
	struct dispatcher *d = l->d;
	char why[256];
	CURLMcode mc;

	if (l->aborting) {
		fail_local(l, x, 1, "dispatcher draining");
		return;
	}
	x->started_ms = clock_wall_ms();
	x->allow_private = d->cfg.allow_private_targets;
	if (disp_xfer_setup(x, d->cfg.user_agent, l->share, &l->sign, why,
	    sizeof(why)) == -1) {
		fail_local(l, x, 0, why);
		return;
	}
	if ((mc = curl_multi_add_handle(l->multi, x->easy)) != CURLM_OK) {
		snprintf(why, sizeof(why), "curl_multi_add_handle: %s",
		    curl_multi_strerror(mc));
		fail_local(l, x, 0, why);
		return;
	}
	x->prev = NULL;
	x->next = l->running;
	if (l->running != NULL)
		l->running->prev = x;
	l->running = x;
	l->nrunning++;
}

/* Starts queued work; returns whether the loop was told to stop. */
static int
take_work(struct disp_loop *l)
{
	struct disp_xfer *batch = NULL, **tail = &batch, *x;
	int n = 0, stop, drain, more;
	int64_t grace;

	pthread_mutex_lock(&l->lock);
	while (n < DISP_LOOP_BATCH && (x = l->qhead) != NULL) {
		l->qhead = x->next;
		x->next = NULL;
		*tail = x;
		tail = &x->next;
		n++;
	}
	if (l->qhead == NULL)
		l->qtail = NULL;
	more = l->qhead != NULL;
	stop = l->stop;
	drain = l->drain;
	grace = l->drain_grace_ms;
	pthread_mutex_unlock(&l->lock);

	if (more)
		loop_wake(l);
	if (drain && !l->drain_armed) {
		l->drain_armed = 1;
		timer_arm(l->drainfd, grace > 0 ? grace : 0);
	}
	while ((x = batch) != NULL) {
		batch = x->next;
		x->next = NULL;
		xfer_start(l, x);
	}
	return stop;
}

static void
log_result(const struct disp_xfer *x, const struct disp_result *res)
{
	const struct log_obj o = { x->req->tenant, x->req->topic,
	    x->req->job_id, x->req->attempt };
	enum log_level lvl = LOG_LVL_DEBUG;
	char *ip = NULL;

	if (res->kind == SCHEDULE_TLS || res->kind == SCHEDULE_BLOCKED ||
	    res->kind == SCHEDULE_ERROR)
		lvl = LOG_LVL_WARN;
	if ((int)lvl > (int)log_get_level())
		return;
	if (curl_easy_getinfo(x->easy, CURLINFO_PRIMARY_IP, &ip) != CURLE_OK ||
	    ip == NULL || *ip == '\0')
		ip = "-";
	log_obj(lvl, &o, "callback %s status=%d ip=%s latency=%lldms%s%s",
	    schedule_outcome_name(res->kind), res->http_status, ip,
	    (long long)res->latency_ms, res->error[0] != '\0' ? ": " : "",
	    res->error);
}

/* Reports every transfer libcurl has finished. */
static void
reap(struct disp_loop *l)
{
	struct disp_result res;
	struct disp_xfer *x;
	CURLMsg *m;
	CURLcode rc;
	char *p;
	CURL *e;
	int left;

	while ((m = curl_multi_info_read(l->multi, &left)) != NULL) {
		if (m->msg != CURLMSG_DONE)
			continue;
		e = m->easy_handle;
		rc = m->data.result;	/* m dies with the remove below */
		p = NULL;
		curl_easy_getinfo(e, CURLINFO_PRIVATE, &p);
		curl_multi_remove_handle(l->multi, e);
		if ((x = (struct disp_xfer *)(void *)p) == NULL)
			continue;
		running_unlink(l, x);
		disp_xfer_result(x, rc, &res);
		log_result(x, &res);
		disp_report(l->d, x, &res);
	}
}

/* Past the drain deadline, or stopping: hand back everything. */
static void
abort_all(struct disp_loop *l, const char *why)
{
	struct disp_xfer *x;
	int empty;

	l->aborting = 1;
	while ((x = l->running) != NULL) {
		running_unlink(l, x);
		curl_multi_remove_handle(l->multi, x->easy);
		log_obj(LOG_LVL_INFO, &(struct log_obj){ x->req->tenant,
		    x->req->topic, x->req->job_id, x->req->attempt },
		    "callback handed back: %s", why);
		fail_local(l, x, 1, why);
	}
	for (;;) {
		(void)take_work(l);	/* hands back, as aborting is set */
		pthread_mutex_lock(&l->lock);
		empty = l->qhead == NULL;
		pthread_mutex_unlock(&l->lock);
		if (empty)
			break;
	}
}

static void
socket_action(struct disp_loop *l, curl_socket_t s, int flags)
{
	CURLMcode mc;
	int running;

	mc = curl_multi_socket_action(l->multi, s, flags, &running);
	if (mc != CURLM_OK && mc != CURLM_BAD_SOCKET)
		log_warnx("dispatcher %d: curl_multi_socket_action: %s",
		    l->idx, curl_multi_strerror(mc));
}

/* The timerfd fired: run libcurl's timeouts, then arm for its next. */
static void
timer_fired(struct disp_loop *l)
{
	long ms = -1;

	l->timer.armed = 0;
	socket_action(l, CURL_SOCKET_TIMEOUT, 0);
	if (!l->timer.armed && !l->timer.now &&
	    curl_multi_timeout(l->multi, &ms) == CURLM_OK)
		timer_set(l, ms);
}

void *
disp_loop_main(void *arg)
{
	struct epoll_event ev[DISP_LOOP_EVENTS];
	struct disp_loop *l = arg;
	int i, n, fd, flags, stop = 0;

	while (!stop) {
		n = epoll_wait(l->epfd, ev, DISP_LOOP_EVENTS,
		    l->timer.now ? 0 : -1);
		if (n == -1) {
			if (errno != EINTR)
				log_warn("dispatcher %d: epoll_wait", l->idx);
			continue;
		}
		for (i = 0; i < n; i++) {
			fd = ev[i].data.fd;
			if (fd == l->wakefd) {
				fd_consume(fd);
				stop = take_work(l);
			} else if (fd == l->timerfd) {
				fd_consume(fd);
				timer_fired(l);
			} else if (fd == l->drainfd) {
				fd_consume(fd);
				abort_all(l, "drain grace period over");
			} else {
				/* An error or hang-up: let libcurl find it
				 * by reading and writing. */
				flags = 0;
				if (ev[i].events & (EPOLLIN | EPOLLERR |
				    EPOLLHUP))
					flags |= CURL_CSELECT_IN;
				if (ev[i].events & (EPOLLOUT | EPOLLERR |
				    EPOLLHUP))
					flags |= CURL_CSELECT_OUT;
				socket_action(l, fd, flags);
			}
		}
		if (l->timer.now) {
			l->timer.now = 0;
			socket_action(l, CURL_SOCKET_TIMEOUT, 0);
		}
		reap(l);
	}
	abort_all(l, "dispatcher stopped");
	return NULL;
}

void
disp_loop_enqueue(struct disp_loop *l, struct disp_xfer *x)
{
	x->next = NULL;
	pthread_mutex_lock(&l->lock);
	if (l->qtail != NULL)
		l->qtail->next = x;
	else
		l->qhead = x;
	l->qtail = x;
	pthread_mutex_unlock(&l->lock);
	loop_wake(l);
}

void
disp_loop_drain(struct disp_loop *l, int64_t grace_ms)
{
	pthread_mutex_lock(&l->lock);
	if (!l->drain) {
		l->drain = 1;
		l->drain_grace_ms = grace_ms;
	}
	pthread_mutex_unlock(&l->lock);
	loop_wake(l);
}

void
disp_loop_stop(struct disp_loop *l)
{
	pthread_mutex_lock(&l->lock);
	l->stop = 1;
	pthread_mutex_unlock(&l->lock);
	loop_wake(l);
}
