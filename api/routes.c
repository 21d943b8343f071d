/*
 * routes.c - the one list of route sets the server serves.  The OpenAPI
 * check (tests/route_list against docs/openapi.yaml, run by make check)
 * reads this same list, so a route cannot exist without being documented,
 * nor be documented without existing.
 */
#include "config.h"

#include <stddef.h>

#include "api/api.h"

const struct api_route *const api_all_routes[] = {
	api_routes_health,
	api_routes_tenants,
	api_routes_topics,
	api_routes_jobs,
	api_routes_pull,
	api_routes_original,
	api_routes_debug,
	api_routes_stats,
	api_routes_metrics,
	api_routes_dashboard,
	NULL,
};
