/*
 * api.h - what the REST handlers share: the application context handed to
 * every handler through api_server_arg(), and the route sets each api/ file
 * exports.  main.c fills the context and starts the server.
 */
#ifndef RETRYD_API_API_H
#define RETRYD_API_API_H

#include <stddef.h>

#include "api/http.h"

struct sched;
struct jrnl;
struct dispatcher;
struct registry;

struct api_ctx {
	struct sched		*sched;
	struct jrnl		*jrnl;		/* NULL: journal off */
	struct dispatcher	*disp;
	struct registry		*reg;
	const char		*version;
	/* 1 when ready to serve; else 0 with a reason. */
	int			(*ready)(char *why, size_t whylen, void *arg);
	void			*ready_arg;
};

/* Route sets, each NULL-method terminated. */
extern const struct api_route api_routes_health[];

/* All route sets, NULL-terminated (for the server and the OpenAPI check). */
extern const struct api_route *const api_all_routes[];

#endif
