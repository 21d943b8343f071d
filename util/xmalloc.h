/*
 * xmalloc.h - allocation wrappers that never return NULL.  Running out of
 * memory is not a condition retryd can serve through, so these log and abort
 * (fatalx) instead of making every caller test for NULL.  Sizes are checked
 * for multiplication overflow.
 */
#ifndef RETRYD_UTIL_XMALLOC_H
#define RETRYD_UTIL_XMALLOC_H

#include <stddef.h>

void	*xmalloc(size_t n);
void	*xcalloc(size_t nmemb, size_t size);
void	*xreallocarray(void *p, size_t nmemb, size_t size);
char	*xstrdup(const char *s);
char	*xstrndup(const char *s, size_t n);
/* asprintf that never fails. */
char	*xasprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
