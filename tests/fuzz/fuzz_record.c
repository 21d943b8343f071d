/*
 * fuzz_record.c - libFuzzer target for the packed job record and attempt
 * log the scheduler reads back from Redis (scheduler/record.c,
 * docs/internals/REDIS-SCHEMA.md): sched_rec_decode() and
 * sched_attlog_decode() on arbitrary bytes.
 *
 * Key decision: besides "no crash" (under ASan: ./configure --enable-fuzz
 * --enable-asan CC=clang), the target checks the record's round trip and
 * aborts when it breaks: a record that decodes, once encoded again (when
 * sched_rec_encode() takes it: a job not in flight, its fields in range),
 * decodes to the same job, and its body is the record's last bytes as
 * they are.  The id key is a generated id's packed key for inputs of even
 * length and a client-given id's text for odd ones, so both forms are
 * read.  Built only with --enable-fuzz (see scheduler/local.mk).
 */
#include "config.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "scheduler/sched_int.h"
#include "util/buf.h"
#include "tests/fuzz/fuzz.h"

/* Two optional strings equal as C strings (what the encoder writes). */
static int
same_str(const char *a, const char *b)
{
	if (a == NULL || b == NULL)
		return a == b;
	return strcmp(a, b) == 0;
}

static int
same_job(const struct sched_job *a, const struct sched_job *b)
{
	return strcmp(a->id, b->id) == 0 && same_str(a->topic, b->topic) &&
	    same_str(a->bizkey, b->bizkey) && a->state == b->state &&
	    a->due_ms == b->due_ms && a->created_ms == b->created_ms &&
	    a->priority == b->priority && a->attempts == b->attempts &&
	    a->version == b->version && a->ttr_ms == b->ttr_ms &&
	    same_str(a->headers_json, b->headers_json) &&
	    same_str(a->schedule, b->schedule) &&
	    a->body_len == b->body_len &&
	    memcmp(a->body, b->body, a->body_len) == 0;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *id = size % 2 == 0 ? "38GE07HHB410000D" : "order-7:a.b";
	const char *rec = (const char *)data;
	struct sched_job *job, *again;
	struct sched_attempt *log;
	char idk[SCHED_IDKEY_MAX];
	size_t idklen, n;
	struct buf b;

	fuzz_check(sched_idkey(id, idk, &idklen) == 0);
	if ((job = sched_rec_decode("t", 3, idk, idklen, rec, size)) != NULL) {
		fuzz_check(strcmp(job->id, id) == 0 && job->shard == 3);
		fuzz_check(job->body != NULL && job->body_len <= size &&
		    memcmp(job->body, rec + size - job->body_len,
		    job->body_len) == 0);
		buf_init(&b, SIZE_MAX / 2);
		if (sched_rec_encode(job, &b) == 0) {
			again = sched_rec_decode("t", 3, idk, idklen, b.data,
			    b.len);
			fuzz_check(again != NULL && same_job(job, again));
			sched_job_free(again);
		}
		buf_free(&b);
		sched_job_free(job);
	}
	if (sched_attlog_decode(rec, size, &log, &n) == 0)
		sched_attempts_free(log, n);
	return 0;
}
