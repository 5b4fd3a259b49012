#include "ddstage/store_server.hpp"
