/* SPDX-License-Identifier: MIT */
/* kvpool-mkmodel: see run.h and mkmodel.h. */
#include "compute/run.h"

int main(int argc, char **argv)
{
	return kvp_mkmodel_main(argc, argv);
}
