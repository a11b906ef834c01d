// Everything a user of tpfabric needs.
#pragma once

#include "tpf/comm.h"
#include "tpf/dtype.h"
#include "tpf/error.h"
#include "tpf/half.h"
#include "tpf/launch_env.h"
#include "tpf/mesh.h"
#include "tpf/store.h"
#include "tpf/topology.h"
