/* SPDX-License-Identifier: MIT */
/* kvpool-mkmodel: main() of the executable; the program is mkmodel_cli.c (see run.h). */
#include "compute/run.h"

int main(int argc, char **argv)
{
	return kvp_mkmodel_main(argc, argv);
}
