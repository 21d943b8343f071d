noinst_LIBRARIES += libapi.a
libapi_a_SOURCES = \
	api/api.h \
	api/http.c api/http.h \
	api/health.c \
	api/routes.c
libapi_a_CFLAGS = $(AM_CFLAGS) $(MHD_CFLAGS) $(JSONC_CFLAGS) \
	$(HIREDIS_CFLAGS) $(CURL_CFLAGS)
