/*
 * routes.c - the one list of route sets the server serves.  The OpenAPI
 * check (`retryd -R` against docs/openapi.yaml) reads this same list, so a
 * route cannot exist without being documented.
 */
#include "config.h"

#include <stddef.h>

#include "api/api.h"

const struct api_route *const api_all_routes[] = {
	api_routes_health,
	NULL,
};
