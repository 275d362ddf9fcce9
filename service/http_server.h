// The HTTP server in front of the Router: see muster/service/http/server.h.
#pragma once

#include "muster/service/http/server.h"
