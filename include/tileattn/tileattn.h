// tileattn/tileattn.h: the whole public API.
#pragma once

#include "tileattn/attention.h"
#include "tileattn/backward.h"
#include "tileattn/convert.h"
#include "tileattn/error.h"
#include "tileattn/kvcache.h"
#include "tileattn/options.h"
#include "tileattn/tensor.h"
#include "tileattn/varlen.h"
#include "tileattn/version.h"
