/*
 * buf.h - a growable byte buffer with a hard cap set at creation
 * (curl lib/curlx/dynbuf.h).  Every buffer fed from outside the process is one
 * of these, so no peer can make us allocate without bound.  The contents are
 * always NUL-terminated (the NUL is not counted in len).
 */
#ifndef RETRYD_UTIL_BUF_H
#define RETRYD_UTIL_BUF_H

#include <stdarg.h>
#include <stddef.h>

struct buf {
	char	*data;	/* owned; NULL until the first append */
	size_t	 len;
	size_t	 cap;
	size_t	 max;	/* len never exceeds this */
};

void	buf_init(struct buf *b, size_t max);
/* 0, or -1 with errno ENOBUFS when max would be exceeded (b unchanged). */
int	buf_append(struct buf *b, const void *p, size_t n);
int	buf_puts(struct buf *b, const char *s);
/*
 * Room for n more bytes and the NUL after them: then the caller may write
 * up to n bytes at data + len, and must add what it wrote to len and put
 * the NUL back.  0, or -1 with errno ENOBUFS as buf_append.
 */
int	buf_reserve(struct buf *b, size_t n);
int	buf_printf(struct buf *b, const char *fmt, ...)
	    __attribute__((format(printf, 2, 3)));
int	buf_vprintf(struct buf *b, const char *fmt, va_list ap)
	    __attribute__((format(printf, 2, 0)));
void	buf_reset(struct buf *b);
/* Hands the data to the caller (who frees it) and empties b. */
char	*buf_steal(struct buf *b, size_t *lenp);
void	buf_free(struct buf *b);

#endif
