/*
 * route_list.c - prints "METHOD PATTERN" for every route the server serves
 * (api_all_routes), one a line, for tests/openapi_check.sh.
 *
 * Key decision: it reads the very table the server routes with, linked from
 * libapi.a, so the check compares the documentation with the code itself
 * rather than with a copy of it.
 */
#include "config.h"

#include <stdio.h>

#include "api/api.h"
#include "conf.h"

/* libapi reads limits from the daemon's configuration; nothing here does. */
struct conf conf;

int
main(void)
{
	const struct api_route *const *set;
	const struct api_route *r;

	for (set = api_all_routes; *set != NULL; set++)
		for (r = *set; r->method != NULL; r++)
			printf("%s %s\n", r->method, r->pattern);
	return ferror(stdout) ? 1 : 0;
}
