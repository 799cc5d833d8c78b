/* SPDX-License-Identifier: MIT */
/* kvpool-run: main() of the executable; the program is run.c (see run.h). */
#include <stdio.h>

#include "compute/run.h"

int main(int argc, char **argv)
{
	return kvp_run_main(argc, argv, stdout);
}
