// The HTTP server in front of the Router: see muster/service/http/server.h.
#pragma once

#include "service/http/server.h"
