/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * The check programs' output: one "KEY VALUE" line per fact, flushed at once, so that a
 * VM test reads every line written before a program hung or was killed.
 */
#ifndef QPIP_CHECK_SAY_H
#define QPIP_CHECK_SAY_H

#include <stdarg.h>
#include <stdio.h>

static void say(const char *key, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void say(const char *key, const char *fmt, ...)
{
	va_list ap;

	printf("%s ", key);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
}

#endif
